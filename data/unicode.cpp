// Hand-written code-point classes and GPT-2 pre-tokeniser (see unicode.h).
#include "data/unicode.h"

namespace driftless::data {

namespace {
struct Range {
  char32_t lo, hi;
};
constexpr Range kLetters[] = {
    {0x41, 0x5A},     {0x61, 0x7A},     {0xAA, 0xAA},     {0xB5, 0xB5},     {0xBA, 0xBA},
    {0xC0, 0xD6},     {0xD8, 0xF6},     {0xF8, 0x2C1},    {0x2C6, 0x2D1},   {0x2E0, 0x2E4},
    {0x2EC, 0x2EC},   {0x2EE, 0x2EE},   {0x370, 0x374},   {0x376, 0x377},   {0x37A, 0x37D},
    {0x37F, 0x37F},   {0x386, 0x386},   {0x388, 0x3F5},   {0x3F7, 0x481},   {0x48A, 0x52F},
    {0x531, 0x556},   {0x561, 0x587},   {0x5D0, 0x5EA},   {0x620, 0x64A},   {0x1E00, 0x1FBC},
    {0x1FC2, 0x1FCC}, {0x1FD0, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FFC}, {0x3041, 0x3096},
    {0x309D, 0x309F}, {0x30A1, 0x30FA}, {0x30FC, 0x30FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF},
    {0xAC00, 0xD7A3}, {0xF900, 0xFAFF}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A},
};
constexpr Range kNumbers[] = {
    {0x30, 0x39},     {0xB2, 0xB3},     {0xB9, 0xB9},     {0xBC, 0xBE},     {0x660, 0x669},
    {0x6F0, 0x6F9},   {0x966, 0x96F},   {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089},
    {0x2150, 0x2189}, {0x2460, 0x249B}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0xFF10, 0xFF19},
};
constexpr Range kSpaces[] = {
    {0x09, 0x0D},     {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};
template <size_t N>
bool in(const Range (&ranges)[N], char32_t c) {
  for (const Range& r : ranges)
    if (c >= r.lo && c <= r.hi) return true;
  return false;
}
}  // namespace

CharClass classify(char32_t c) {
  if (in(kLetters, c)) return CharClass::letter;
  if (in(kNumbers, c)) return CharClass::number;
  if (in(kSpaces, c)) return CharClass::space;
  return CharClass::other;
}

char32_t decode_utf8(std::string_view s, size_t i, size_t& length) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  length = 1;
  if (c < 0x80) return c;
  size_t n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0xFFFD;
  char32_t cp = c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0xFFFD;
  length = n;
  return cp;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  // Code points with their byte offsets; a malformed byte classifies as `other`.
  std::vector<char32_t> cp;
  std::vector<size_t> at;
  for (size_t i = 0, len = 0; i < text.size(); i += len) {
    at.push_back(i);
    cp.push_back(decode_utf8(text, i, len));
  }
  at.push_back(text.size());
  const size_t n = cp.size();
  auto cls = [&](size_t k) { return classify(cp[k]); };
  std::vector<std::string_view> out;
  auto emit = [&](size_t b, size_t e) { out.push_back(text.substr(at[b], at[e] - at[b])); };
  size_t i = 0;
  while (i < n) {
    if (cp[i] == U'\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
      const char32_t a = cp[i + 1], b = i + 2 < n ? cp[i + 2] : 0;
      size_t len = 0;
      if (a == U's' || a == U't' || a == U'm' || a == U'd')
        len = 2;
      else if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l'))
        len = 3;
      if (len) {
        emit(i, i + len);
        i += len;
        continue;
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional ASCII space, then a run.
    const size_t j = (cp[i] == U' ' && i + 1 < n) ? i + 1 : i;
    const CharClass c = cls(j);
    if (c != CharClass::space) {
      size_t e = j + 1;
      while (e < n && cls(e) == c) ++e;
      emit(i, e);
      i = e;
      continue;
    }
    // `\s+(?!\S)` then `\s+`: a whitespace run leaves its last character to the next
    // token unless the run ends the text or is a single character.
    size_t e = i + 1;
    while (e < n && cls(e) == CharClass::space) ++e;
    if (e < n && e - i >= 2) --e;
    emit(i, e);
    i = e;
  }
  return out;
}

}  // namespace driftless::data
