// NVRTC compilation of the attention programs (nvrtc_compile.h): the embedded kernel headers
// go in as named headers, the kernels are instantiated through their name expressions, and
// the result is a CUBIN for the program's architecture.
#include "layers/attention/jit/nvrtc_compile.h"

#include <nvrtc.h>

#include <memory>

#include "engine/core/error.h"
#include "layers/attention/jit/kernel_headers.h"

namespace driftless::layers::jit {
namespace {

constexpr const char* kOp = "attention";
constexpr const char* kMagic = "DLJIT1\n";

struct ProgramHandle {
  nvrtcProgram p = nullptr;
  ~ProgramHandle() {
    if (p != nullptr) nvrtcDestroyProgram(&p);
  }
};

void check(nvrtcResult r, const char* what) {
  DL_CHECK(r == NVRTC_SUCCESS, kOp, "NVRTC " << what << ": " << nvrtcGetErrorString(r));
}

}  // namespace

CompiledProgram compile_program(const AttentionProgram& program) {
  const std::vector<EmbeddedHeader>& headers = kernel_headers();
  std::vector<const char*> texts, names;
  for (const EmbeddedHeader& h : headers) {
    texts.push_back(h.text.c_str());
    names.push_back(h.name.c_str());
  }
  ProgramHandle h;
  check(nvrtcCreateProgram(&h.p, program.source.c_str(), "driftless_attention_jit.cu",
                           int(headers.size()), texts.data(), names.data()),
        "create");
  for (const std::string& k : program.kernels)
    check(nvrtcAddNameExpression(h.p, k.c_str()), "name");
  std::vector<const char*> opts;
  for (const std::string& o : program.options) opts.push_back(o.c_str());
  const nvrtcResult r = nvrtcCompileProgram(h.p, int(opts.size()), opts.data());
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(h.p, &n);
    std::string log(n, '\0');
    if (n > 0) nvrtcGetProgramLog(h.p, log.data());
    DL_FAIL(kOp, "NVRTC could not compile the " << pass_name(program.spec.pass)
                                                << " kernels of a score expression for "
                                                << program.spec.arch << ":\n"
                                                << log << "\nprogram:\n"
                                                << program.source);
  }
  CompiledProgram c;
  for (const std::string& k : program.kernels) {
    const char* lowered = nullptr;
    check(nvrtcGetLoweredName(h.p, k.c_str(), &lowered), "lowered name");
    c.lowered.emplace_back(lowered);
  }
  size_t n = 0;
  check(nvrtcGetCUBINSize(h.p, &n), "CUBIN size");
  DL_CHECK(
      n > 0, kOp,
      "NVRTC gave an empty CUBIN (is the architecture " << program.spec.arch << " a real one?)");
  c.cubin.resize(n);
  check(nvrtcGetCUBIN(h.p, c.cubin.data()), "CUBIN");
  return c;
}

std::string to_binary(const CompiledProgram& c) {
  std::string s = kMagic + std::to_string(c.lowered.size()) + "\n";
  for (const std::string& l : c.lowered) s += l + "\n";
  return s + c.cubin;
}

CompiledProgram from_binary(const std::string& binary) {
  const std::string magic = kMagic;
  DL_CHECK(binary.compare(0, magic.size(), magic) == 0, kOp, "not a compiled attention program");
  size_t at = magic.size();
  auto line = [&] {
    const size_t end = binary.find('\n', at);
    DL_CHECK(end != std::string::npos, kOp, "truncated compiled attention program");
    std::string l = binary.substr(at, end - at);
    at = end + 1;
    return l;
  };
  CompiledProgram c;
  const std::string count = line();
  DL_CHECK(!count.empty() && count.size() < 4 &&
               count.find_first_not_of("0123456789") == std::string::npos,
           kOp, "malformed compiled attention program");
  const int n = std::stoi(count);
  for (int i = 0; i < n; ++i) c.lowered.push_back(line());
  c.cubin = binary.substr(at);
  DL_CHECK(!c.cubin.empty(), kOp, "compiled attention program without a CUBIN");
  return c;
}

}  // namespace driftless::layers::jit
