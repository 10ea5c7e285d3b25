// CUDA source of a modifier expression (expr.h emit_cuda): a self-contained device functor
// with the score_mod.h interface in float, for kernels compiled at run time with NVRTC.
// Same operation order and conversions as the CPU evaluation (eval.cpp) in float, with the
// GPU's fast approximations of exp, log, pow, tanh and division (a few ulp, as the built-in
// softcap's tanh), and table reads that depend on the head alone hoisted into bind_into.
#include <algorithm>
#include <charconv>
#include <sstream>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {

namespace {

const char* kHelpers = R"(#ifndef DL_EXPR_HELPERS
#define DL_EXPR_HELPERS
template <class X> __device__ __forceinline__ X dl_min(X a, X b) { return b < a ? b : a; }
template <class X> __device__ __forceinline__ X dl_max(X a, X b) { return a < b ? b : a; }
template <class X> __device__ __forceinline__ X dl_clamp(X x, X lo, X hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
__device__ __forceinline__ float dl_abs(float x) { return fabsf(x); }
__device__ __forceinline__ long long dl_abs(long long x) { return x < 0 ? -x : x; }
// tanh(x) = 1 - 2 / (2^(2 x log2 e) + 1) from ex2.approx and rcp.approx: absolute error ~1e-7,
// exactly +-1 for large |x| (the built-in softcap's tanh_fast).
__device__ __forceinline__ float dl_tanh(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * 2.8853900817779268f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.f));
  return fmaf(-2.f, r, 1.f);
}
#endif
)";

bool mentions_position_or_score(const Node& n) {
  if (n.op == Op::q || n.op == Op::k || n.op == Op::score) return true;
  for (const auto& a : n.args)
    if (mentions_position_or_score(*a)) return true;
  return false;
}

// The table reads of a score expression whose subscripts depend on the head alone, in the
// order a depth-first walk meets them (one slot each; the same node object in both the
// value and derivative trees shares a slot).
void collect_bound(const Node& n, std::vector<const Node*>& out) {
  if (n.op == Op::param && !mentions_position_or_score(n)) {
    for (const Node* o : out)
      if (o == &n) return;
    out.push_back(&n);
    return;
  }
  for (const auto& a : n.args) collect_bound(*a, out);
}

std::vector<const Node*> bound_reads(const Program& p) {
  std::vector<const Node*> out;
  if (p.is_mask || !p.root) return out;
  collect_bound(*p.root, out);
  if (p.d_score) collect_bound(*p.d_score, out);
  for (const auto& d : p.d_occurrence) collect_bound(*d, out);
  return out;
}

struct Emitter {
  const Program& p;
  bool members;
  std::vector<const Node*> bound;  // hoisted reads: bd->v[i] where bd is given
  bool use_bound = true;

  std::string real_literal(double v) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    std::string s(buf, r.ptr);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return "((float)" + s + ")";
  }
  std::string args(const Node& n, const char* f) {
    std::string s = std::string(f) + "(";
    for (size_t i = 0; i < n.args.size(); ++i) s += (i ? ", " : "") + e(*n.args[i]);
    return s + ")";
  }
  std::string bin(const Node& n, const char* op) {
    return "(" + e(*n.args[0]) + " " + op + " " + e(*n.args[1]) + ")";
  }
  std::string e(const Node& n) {
    switch (n.op) {
      case Op::literal:
        if (members && n.slot >= 0)
          return (n.type == Type::integer ? "ci[" : "c[") + std::to_string(n.slot) + "]";
        return n.type == Type::integer ? "(" + std::to_string(int64_t(n.value)) + "LL)"
                                       : real_literal(n.value);
      case Op::score:
        return "score";
      case Op::q:
        return "q";
      case Op::k:
        return "k";
      case Op::h:
        return "hg";
      case Op::param: {
        std::string idx = "0LL";
        for (size_t d = 0; d < n.args.size(); ++d)
          idx = "(" + idx + " * " + std::to_string(n.shape[d]) + "LL + " + e(*n.args[d]) + ")";
        const std::string read = "p_" + p.params[size_t(n.param)].name + "[" + idx + "]";
        if (use_bound)
          for (size_t i = 0; i < bound.size(); ++i)
            if (bound[i] == &n) return "(bd ? bd->v[" + std::to_string(i) + "] : " + read + ")";
        return read;
      }
      case Op::to_real:
        return "((float)" + e(*n.args[0]) + ")";
      case Op::neg:
        return "(-" + e(*n.args[0]) + ")";
      case Op::lnot:
        return "(!" + e(*n.args[0]) + ")";
      case Op::add:
        return bin(n, "+");
      case Op::sub:
        return bin(n, "-");
      case Op::mul:
        return bin(n, "*");
      case Op::div:  // integer division keeps C's; real division is the fast approximation
        if (n.type == Type::integer) return bin(n, "/");
        return "__fdividef(" + e(*n.args[0]) + ", " + e(*n.args[1]) + ")";
      case Op::lt:
        return bin(n, "<");
      case Op::le:
        return bin(n, "<=");
      case Op::gt:
        return bin(n, ">");
      case Op::ge:
        return bin(n, ">=");
      case Op::eq:
        return bin(n, "==");
      case Op::ne:
        return bin(n, "!=");
      case Op::land:
        return bin(n, "&&");
      case Op::lor:
        return bin(n, "||");
      case Op::where:
        return "(" + e(*n.args[0]) + " ? " + e(*n.args[1]) + " : " + e(*n.args[2]) + ")";
      case Op::abs:
        return args(n, "dl_abs");
      case Op::min:
        return args(n, "dl_min");
      case Op::max:
        return args(n, "dl_max");
      case Op::clamp:
        return args(n, "dl_clamp");
      case Op::exp:
        return args(n, "__expf");
      case Op::log:
        return args(n, "__logf");
      case Op::tanh:
        return args(n, "dl_tanh");
      case Op::sqrt:
        return args(n, "sqrtf");
      case Op::pow:
        return args(n, "__powf");
      case Op::sigmoid:
        return "__fdividef(1.0f, 1.0f + __expf(-" + e(*n.args[0]) + "))";
      case Op::floor:
        return "((long long)floorf(" + e(*n.args[0]) + "))";
      case Op::ceil:
        return "((long long)ceilf(" + e(*n.args[0]) + "))";
      case Op::round:
        return "((long long)roundf(" + e(*n.args[0]) + "))";
      case Op::to_int:
        return "((long long)" + e(*n.args[0]) + ")";
    }
    return "0";
  }
};

// The learnable table ordinal (grad_tables' index) of each declared parameter, -1 if fixed.
std::vector<int> grad_table_of(const Program& p) {
  std::vector<int> out(p.params.size(), -1);
  int n = 0;
  for (size_t i = 0; i < p.params.size(); ++i)
    if (p.grad_offset[i] >= 0) out[i] = n++;
  return out;
}

}  // namespace

std::vector<GradTable> grad_tables(const Program& p) {
  std::vector<GradTable> out;
  if (p.is_mask) return out;
  for (size_t i = 0; i < p.params.size(); ++i) {
    if (p.grad_offset[i] < 0) continue;
    const ParamDecl& d = p.params[i];
    bool by_head = !d.shape.empty();
    for (const Node* o : p.occurrences)
      if (o->param == int(i)) by_head = by_head && !o->args.empty() && o->args[0]->op == Op::h;
    out.push_back({p.grad_offset[i], d.numel(), by_head ? d.numel() / d.shape[0] : 0});
  }
  return out;
}

int64_t grad_slots(const Program& p, int64_t group) {
  int64_t n = 0;
  for (const GradTable& t : grad_tables(p)) n += t.per_head > 0 ? group * t.per_head : t.numel;
  return n;
}

int bound_slots(const Program& p) {
  return std::max<int>(1, int(bound_reads(p).size()));
}

std::string emit_cuda(const Program& p, const std::string& name, bool constants_as_members) {
  Emitter em{p, constants_as_members, bound_reads(p)};
  std::ostringstream o;
  const char* locals =
      "    const long long hg = (long long)h + head_offset, q = q_idx, k = k_idx;\n"
      "    (void)b; (void)hg; (void)q; (void)k;\n";
  o << kHelpers << "// " << (p.is_mask ? "mask_mod: " : "score_mod: ") << p.canonical() << "\n"
    << "struct " << name << " {\n";
  for (const ParamDecl& d : p.params)
    o << "  const float* p_" << d.name << ";  // " << (d.learnable ? "learnable " : "") << "("
      << (d.shape.empty() ? "" : std::to_string(d.shape[0]))
      << (d.shape.size() > 1 ? ", " + std::to_string(d.shape[1]) : "") << ")\n";
  if (p.param_count > 0)
    o << "  unsigned long long* grad_acc;  // the gradient's fixed-point sums (hi, lo, overflow)\n";
  o << "  int head_offset;  // h of the expression = head_offset + the call's head\n";
  const size_t slots = p.constants().size();
  if (constants_as_members && slots > 0)
    o << "  float c[" << slots << "];  // real literals by slot\n"
      << "  long long ci[" << slots << "];  // integer literals by slot\n";
  if (p.is_mask) {
    o << "  __device__ bool visible(int b, int h, int q_idx, int k_idx) const {\n"
      << locals << "    (void)h;\n    return " << em.e(*p.root) << ";\n  }\n};\n";
    return o.str();
  }
  // Bound: the head-only table reads, filled once per head by bind_into; value and
  // derivative read them from bd when given, from the tables otherwise.
  o << "  struct Bound { float v[" << bound_slots(p) << "]; };\n"
    << "  __device__ void bind_into(Bound& bd_out, int h) const {\n"
    << "    const long long hg = (long long)h + head_offset, q = 0, k = 0;\n"
    << "    (void)hg; (void)q; (void)k;\n    const Bound* bd = nullptr; (void)bd;\n";
  em.use_bound = false;
  for (size_t i = 0; i < em.bound.size(); ++i)
    o << "    bd_out.v[" << i << "] = " << em.e(*em.bound[i]) << ";\n";
  em.use_bound = true;
  o << "  }\n"
    << "  __device__ float value(float score, int b, int h, int q_idx, int k_idx,\n"
    << "                         const Bound* bd = nullptr) const {\n"
    << locals << "    return " << em.e(*p.root) << ";\n  }\n"
    << "  __device__ float derivative(float score, int b, int h, int q_idx, int k_idx,\n"
    << "                              const Bound* bd = nullptr) const {\n"
    << locals << "    return " << em.e(*p.d_score) << ";\n  }\n";
  // Learnable tables: grad_tables' description, and each occurrence's entry and
  // derivative handed to the kernel's accumulator (acc.add(table, entry, dvalue, d)).
  const std::vector<GradTable> tables = grad_tables(p);
  o << "  static constexpr bool kHasParamGrad = " << (p.param_count > 0 ? "true" : "false")
    << ";\n  static constexpr int kGradTables = " << tables.size() << ";\n";
  if (p.param_count > 0) {
    o << "  __host__ __device__ long long param_count() const { return " << p.param_count
      << "LL; }\n"
      << "  __device__ static void grad_table(int t, long long& offset, long long& numel,\n"
      << "                                    long long& per_head) {\n    switch (t) {\n";
    for (size_t t = 0; t < tables.size(); ++t)
      o << "      case " << t << ": offset = " << tables[t].offset
        << "LL; numel = " << tables[t].numel << "LL; per_head = " << tables[t].per_head
        << "LL; return;\n";
    o << "      default: offset = numel = per_head = 0; return;\n    }\n  }\n"
      << "  template <class Acc>\n"
      << "  __device__ void param_grad(float dvalue, float score, int b, int h, int q_idx, "
         "int k_idx, Acc& acc) const {\n"
      << locals;
    em.use_bound = false;  // reads the tables (no Bound here)
    const std::vector<int> table_of = grad_table_of(p);
    for (size_t i = 0; i < p.occurrences.size(); ++i) {
      const Node& occ = *p.occurrences[i];
      std::string idx = "0LL";
      for (size_t d = 0; d < occ.args.size(); ++d)
        idx = "(" + idx + " * " + std::to_string(occ.shape[d]) + "LL + " + em.e(*occ.args[d]) + ")";
      o << "    acc.add(" << table_of[size_t(occ.param)] << ", " << idx << ", dvalue, "
        << em.e(*p.d_occurrence[i]) << ");\n";
    }
    em.use_bound = true;
    o << "  }\n";
  }
  o << "};\n";
  return o.str();
}

}  // namespace driftless::layers::expr
