// The score/mask modifier expression language (README "Score and mask expressions";
// ARCHITECTURE.md "Score modifiers"): the AST, the parser and static checks, evaluation on
// the CPU, symbolic derivatives, canonical text for a kernel cache, and the CUDA emitter.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace driftless::layers::expr {

// Static types: indices (q, k, h, integer literals and integer arithmetic) are exact
// integers; score and parameters are real; comparisons are boolean and only feed
// where(), ?:, &&, || and !.
enum class Type { integer, real, boolean };

enum class Op {
  literal,
  score,
  q,
  k,
  h,
  param,  // leaves (param: a table entry, args are its subscripts)
  neg,
  add,
  sub,
  mul,
  div,  // arithmetic
  lt,
  le,
  gt,
  ge,
  eq,
  ne,
  land,
  lor,
  lnot,  // boolean
  where,
  abs,
  min,
  max,
  clamp,
  exp,
  log,
  tanh,
  sqrt,
  pow,
  sigmoid,
  floor,
  ceil,
  round,
  to_int,  // real -> integer: not differentiable
  to_real  // integer -> real (inserted by the type checker)
};

struct Node;
using NodePtr = std::shared_ptr<const Node>;

struct Node {
  Op op = Op::literal;
  Type type = Type::real;
  double value = 0;            // literal
  int slot = -1;               // literal: its index in constants(); -1 for one made by derive()
  int param = -1;              // param: index into Program::params
  int occurrence = -1;         // param: which learnable occurrence (derivative variable), or -1
  int column = 0;              // 1-based column in the source, for errors
  std::vector<int64_t> shape;  // param: the table's declared shape
  std::vector<NodePtr> args;
};

// A parameter declared in model.score_mod_params: a scalar, (heads) or (heads, n) table.
struct ParamDecl {
  std::string name;
  std::vector<int64_t> shape;  // {} scalar, {H} or {H, n}
  std::vector<double> init;    // numel() values, row-major
  bool learnable = false;
  int64_t numel() const;
};

struct Literal {
  double value;
  bool integer;
};

// A checked score or mask expression. Built by compile_*; immutable afterwards.
struct Program {
  std::string source;
  bool is_mask = false;
  int heads = 0;  // the model's query heads: h is in [0, heads)
  std::vector<ParamDecl> params;
  NodePtr root;  // real for a score modifier, boolean for a mask
  // Score modifiers only: d root / d score, and d root / d (occurrence i) for every
  // occurrence of a learnable parameter in root, with that occurrence's node.
  NodePtr d_score;
  std::vector<NodePtr> d_occurrence;
  std::vector<const Node*> occurrences;
  std::vector<int64_t> grad_offset;  // per param: offset in the flat gradient, -1 if constant
  int64_t param_count = 0;           // learnable scalars
  // emit_cuda(*this, "DlFunctor", true), made once by compile_*: what identifies the functor a
  // run-time compiled kernel inlines. The kernels' program memo reads it on every launch
  // (jit_launch.cpp), where emitting it again cost 5-9 us of host time a call.
  std::string functor_text;

  bool reads_positions() const;  // mentions q or k
  bool reads_score() const;

  // Normalized text: independent of whitespace, redundant parentheses and how a number is
  // written (30, 30.0, 3e1 in a real context are one literal).
  std::string canonical() const;
  // The same with every source literal replaced by a slot ($i real, #i integer), and the
  // literals in slot order: a kernel cache compiles the structure once and passes constants.
  std::string canonical_structure() const;
  std::vector<Literal> constants() const;
};

// What an expression may be, checked by compile_* before any other work: its length in
// characters, how deep it nests (parentheses, unary operators and the operators of a chain
// such as a + b + c each count a level), and the terms of its value and derivatives as the
// evaluator and the emitter walk them (a subexpression read twice counts twice).
constexpr size_t kMaxSourceLength = 16384;
constexpr int kMaxDepth = 512;
constexpr int64_t kMaxTerms = 65536;
// Positions are 32-bit (the kernels' and the CPU functor's): q and k are in [0, kMaxPosition],
// and int(), floor(), ceil() and round() saturate to the 32-bit integers.
constexpr int64_t kMaxPosition = 2147483647;
constexpr size_t kMaxParamNameLength = 64;

// "" when `name` may name a parameter: an identifier ([A-Za-z_][A-Za-z0-9_]*) of at most
// kMaxParamNameLength characters that is not a name of the language (score, q, k, h, the
// functions), a C++ or CUDA keyword, or reserved for the emitted code (a leading '__' or '_'
// and a capital, a dl_ or DL_ prefix); else why not, with the name quoted printably.
std::string param_name_problem(const std::string& name);
// Whether `name` is one of the expression language's functions (abs, tanh, ...; parse.cpp).
bool is_function_name(const std::string& name);

// "[score_mod] <message> at column N:\n  <source>\n  <caret>" on any error; `heads` bounds h.
std::shared_ptr<const Program> compile_score_mod(const std::string& source,
                                                 const std::vector<ParamDecl>& params, int heads);
std::shared_ptr<const Program> compile_mask_mod(const std::string& source,
                                                const std::vector<ParamDecl>& params, int heads);

// Printing (canonical form) of any node; with_slots prints $i / #i for source literals.
std::string to_string(const Node& n, const Program& p, bool with_slots = false);

// d n / d x where x is `score` (occurrence < 0) or learnable occurrence i, simplified.
NodePtr derive(const NodePtr& n, int occurrence);
// Folds derived literals (never source ones, whose values a kernel cache passes at run time).
NodePtr simplify(const NodePtr& n);

// Values of the parameters a program reads, one pointer per declared parameter.
template <class T>
struct Bindings {
  const T* const* params = nullptr;
  int head_offset = 0;  // h of the expression = head_offset + the call's local head
};

// Evaluation in T (float or double); indices in exact integers. h is the global head.
template <class T>
T eval_real(const Node& n, const Bindings<T>& b, T score, int64_t h, int64_t q, int64_t k);
template <class T>
bool eval_bool(const Node& n, const Bindings<T>& b, T score, int64_t h, int64_t q, int64_t k);
template <class T>
int64_t eval_int(const Node& n, const Bindings<T>& b, T score, int64_t h, int64_t q, int64_t k);
// Row-major flat index of a param node's entry.
template <class T>
int64_t param_index(const Node& n, const Bindings<T>& b, T score, int64_t h, int64_t q, int64_t k);

// What a mask does over a box of pairs: hides every pair, shows every pair, or either (or
// not proven). The box holds q in [q0, q1], k in [k0, k1] and the expression's h in [h0, h1]
// (global heads: the call's plus head_offset), inclusive and non-empty.
enum class MaskCover { hidden, visible, mixed };
struct PairBox {
  int64_t q0, q1, k0, k1, h0, h1;
};
// Interval arithmetic over the mask's integer subexpressions and three-valued logic over its
// comparisons (mask_cover.cpp): conservative, never hidden (visible) where some pair of the box
// is visible (hidden); a comparison of reals or of table entries is mixed. The CUDA host skips
// the tiles a mask hides whole (layers/attention/attention_cuda.cpp).
MaskCover mask_cover(const Program& mask, const PairBox& box);

// Where the CUDA kernels' float value of a score expression lies over every pair, as interval
// arithmetic proves it (value_range.cpp): lo and hi in the extended reals (an infinite bound:
// the value may be that infinity), nan: it may be NaN. It takes |score| and every table entry
// to be at most kModerate (tables are kernel arguments: any value of a fixed or learnable
// table runs in the same kernel), positions to be in their proven integer ranges, and the
// softmax scale to be in [2^-8, 2^8]; a float result past 2^116 in magnitude may be infinite,
// and one within 2^-100 of zero may be zero.
constexpr double kModerate = 0x1p48;
struct RealRange {
  double lo = 0, hi = 0;
  bool nan = false;
};
RealRange value_range(const Program& p);
// True when the score expression's value in the kernels (value_log2) may be -inf on a pair:
// its emitted functor then makes -inf NaN (emit_cuda), so that a -inf on a pair the masks
// show makes its row NaN, as on the CPU, rather than weighing 0 as a hidden pair. False for
// a mask.
bool may_be_minus_inf(const Program& p);

// CUDA source of a device functor with the score_mod.h interface for T = float, named
// `name`: value, derivative, param_count, param_grad (and visible(b, h, q, k) for a mask).
// constants_as_members: literals read from a member array `c` (the kernel cache's form)
// instead of being written into the code.
std::string emit_cuda(const Program& p, const std::string& name, bool constants_as_members = false);
// The learnable tables of a score expression as the CUDA dK/dV kernel accumulates their
// gradients (cuda/fast/param_grad.cuh), in declaration order: the table's offset in the flat
// gradient, its entries, and per_head, its entries a head row (numel / heads) when every
// occurrence subscripts it by h first (bias[h, ...]: a CTA keeps the rows of its query heads),
// else 0 (the CTA keeps the whole table).
struct GradTable {
  int64_t offset = 0, numel = 0, per_head = 0;
};
std::vector<GradTable> grad_tables(const Program& p);
// The entries one dK/dV CTA keeps in shared memory for a GQA group of `group` query heads,
// and the most it may keep (kGradSlotBytes each): beyond it, learnable tables are refused on
// CUDA.
int64_t grad_slots(const Program& p, int64_t group);
constexpr int64_t kMaxGradSlots = 4096;
// How many table reads of p's score expression depend on the head alone (subscripts of h and
// literals: ALiBi's slope[h]): the emitted functor's Bound holds them, read once per (tile,
// head) in bind_into instead of once per score; at least 1 (Bound is never empty).
int bound_slots(const Program& p);
// True when p's value calls tanh, exp, log, pow, sqrt or sigmoid: the emitted functor's
// kHeavy, which gives the forward kernels the built-in softcap's tile shapes (fast_common.cuh
// HeavyMod), so 30 * tanh(score / 30) runs (and rounds) as the built-in does.
bool heavy(const Program& p);
// The constants the emitted functor's value_log2 and derivative_dot fold (its member f: the
// softmax scale, tanh's 2 log2 e, the value's log2 e and the source literals of each
// product chain, multiplied in IEEE float), for a call of softmax scale `scale`.
int fold_count(const Program& p);
std::vector<float> folded_constants(const Program& p, float scale);

}  // namespace driftless::layers::expr
