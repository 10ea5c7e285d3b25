// run_distributed (distributed_run.h).
#include "apps/distributed_run.h"

#include "layers/attention/jit/kernel_cache.h"
#include "parallel/kv_exchange.h"
#include "parallel/process_group.h"
#include "train/rank_agreement.h"

namespace driftless::apps {

int run_distributed(const train::Config& config,
                    const std::function<int(train::TrainerOptions&)>& body) {
  layers::jit::configure_process_kernel_cache(train::kernel_cache_options(config));
  parallel::WorldOptions wo;
  wo.comm.timeout_s = config.distributed.timeout_seconds;
  parallel::World world(wo);
  int status = 0;
  auto run = [&] {
    // Before any group or model exists: a rank with another config would otherwise crash in
    // a collective or train silently apart.
    auto control = world.communicator(Device::cpu);
    train::check_ranks_agree(*control, train::config_entries(config), "configuration");
    // NCCL communicators for cuda runs, so gradients and K/V stay on the device.
    const Device device = config.precision.device;
    const bool hybrid = config.distributed.context_parallel.size > 1 &&
                        config.distributed.context_parallel.kind == layers::ContextParallel::hybrid;
    parallel::ProcessGroups groups(
        world,
        // The ranks sharing a sequence: SDP or context parallel (config.cpp allows one).
        {int(config.distributed.data_parallel),
         int(config.distributed.sequence_data_parallel * config.distributed.context_parallel.size),
         hybrid ? int(config.distributed.context_parallel.group_size) : 0},
        device);
    auto exchange = parallel::make_kv_exchange(groups.sdp());
    // The hybrid's all-to-all inside its group and ring across the groups.
    std::unique_ptr<KvExchange> cp_group, cp_ring;
    if (hybrid) {
      cp_group = parallel::make_kv_exchange(*groups.cp_group());
      cp_ring = parallel::make_kv_exchange(*groups.cp_ring());
    }
    train::TrainerOptions options;
    options.rank = world.rank();
    options.data_group = &groups.data();
    options.sdp_exchange = exchange.get();
    options.cp_group_exchange = cp_group.get();
    options.cp_ring_exchange = cp_ring.get();
    options.control = control.get();
    status = body(options);
  };
  if (!world.uses_mpi() || world.size() == 1) {
    run();
    return status;
  }
  const int guarded = parallel::run_guarded(world, run);
  return guarded != 0 ? guarded : status;
}

}  // namespace driftless::apps
