// The identity tap node (tap.h).
#include "layers/tap.h"

#include "engine/autograd/autograd.h"

namespace driftless::layers {

Tensor tap(const Tensor& x, const std::string& name, TensorSink* sink,
           const std::vector<PartRows>& rows) {
  if (!sink) return x;
  sink->write(name, "forward", x, rows);
  Tensor y = x.detach();
  return autograd::record("tap", {x}, y, autograd::Context{},
                          [sink, name, rows](autograd::Context&, const std::vector<Tensor>& g) {
                            sink->write(name, "backward", g[0], rows);
                            return std::vector<Tensor>{g[0]};
                          });
}

}  // namespace driftless::layers
