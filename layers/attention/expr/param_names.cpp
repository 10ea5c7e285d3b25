// Parameter names of modifier expressions (expr.h param_name_problem): a name reaches the
// generated CUDA source, so it must be an identifier that is no name of the language, of C++ or
// CUDA, or of the generated code (docs/guarantees.md, "Expressions and the kernel cache").
#include <cctype>
#include <cstdio>
#include <string>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {
namespace {

const char* const kKeywords[] = {"alignas",
                                 "alignof",
                                 "and",
                                 "and_eq",
                                 "asm",
                                 "auto",
                                 "bitand",
                                 "bitor",
                                 "bool",
                                 "break",
                                 "case",
                                 "catch",
                                 "char",
                                 "char8_t",
                                 "char16_t",
                                 "char32_t",
                                 "class",
                                 "compl",
                                 "concept",
                                 "const",
                                 "consteval",
                                 "constexpr",
                                 "constinit",
                                 "const_cast",
                                 "continue",
                                 "co_await",
                                 "co_return",
                                 "co_yield",
                                 "decltype",
                                 "default",
                                 "delete",
                                 "do",
                                 "double",
                                 "dynamic_cast",
                                 "else",
                                 "enum",
                                 "explicit",
                                 "export",
                                 "extern",
                                 "false",
                                 "final",
                                 "float",
                                 "for",
                                 "friend",
                                 "goto",
                                 "if",
                                 "import",
                                 "inline",
                                 "int",
                                 "long",
                                 "module",
                                 "mutable",
                                 "namespace",
                                 "new",
                                 "noexcept",
                                 "not",
                                 "not_eq",
                                 "nullptr",
                                 "operator",
                                 "or",
                                 "or_eq",
                                 "override",
                                 "private",
                                 "protected",
                                 "public",
                                 "register",
                                 "reinterpret_cast",
                                 "requires",
                                 "restrict",
                                 "return",
                                 "short",
                                 "signed",
                                 "sizeof",
                                 "static",
                                 "static_assert",
                                 "static_cast",
                                 "struct",
                                 "switch",
                                 "template",
                                 "this",
                                 "thread_local",
                                 "throw",
                                 "true",
                                 "try",
                                 "typedef",
                                 "typeid",
                                 "typename",
                                 "union",
                                 "unsigned",
                                 "using",
                                 "virtual",
                                 "void",
                                 "volatile",
                                 "wchar_t",
                                 "while",
                                 "xor",
                                 "xor_eq",
                                 "NULL",
                                 "threadIdx",
                                 "blockIdx",
                                 "blockDim",
                                 "gridDim",
                                 "warpSize"};

// The name as a printable, one-line quotation (a hostile name may hold anything).
std::string quoted(const std::string& name) {
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + (name.size() > 80 ? "'..." : "'");
}

}  // namespace

std::string param_name_problem(const std::string& name) {
  const std::string q = "parameter name " + quoted(name);
  bool ident =
      !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) ident = ident && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ident || name.size() > kMaxParamNameLength)
    return q + " is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most " +
           std::to_string(kMaxParamNameLength) + " characters)";
  if (is_function_name(name)) return q + " is a function name";
  for (const char* r : {"score", "q", "k", "h", "doc", "b"})
    if (name == r) return q + " is reserved";
  for (const char* r : kKeywords)
    if (name == r) return q + " is a C++ or CUDA keyword";
  const bool underscore = name.size() > 1 && name[0] == '_' &&
                          (name[1] == '_' || std::isupper(static_cast<unsigned char>(name[1])));
  if (underscore || name.find("__") != std::string::npos || name.rfind("dl_", 0) == 0 ||
      name.rfind("DL_", 0) == 0)
    return q + " is reserved for the generated code ('__', '_' and a capital, dl_, DL_)";
  return "";
}

}  // namespace driftless::layers::expr
