// NVRTC compilation of an attention program (attention_program.h) to a CUBIN, and the binary
// the kernel cache stores for it: the kernels' lowered (mangled) names, then the CUBIN.
// No GPU needed: the architecture is named by the program.
#pragma once
#include <string>
#include <vector>

#include "layers/attention/jit/attention_program.h"

namespace driftless::layers::jit {

struct CompiledProgram {
  std::vector<std::string> lowered;  // one per AttentionProgram::kernels, same order
  std::string cubin;
};

// Compiles with the embedded kernel headers; throws "[attention] NVRTC ..." with the log on
// failure (the program text is appended, so the error names what failed).
CompiledProgram compile_program(const AttentionProgram& program);

// The kernel cache's binary of a compiled program, and back (throws on a malformed binary).
std::string to_binary(const CompiledProgram& c);
CompiledProgram from_binary(const std::string& binary);

}  // namespace driftless::layers::jit
