// Unicode pieces the GPT-2 tokenizer needs: UTF-8 decoding, a hand-written classification
// of code points (letter / number / whitespace) and GPT-2's pre-tokenisation regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// implemented by hand (no regex engine).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace driftless::data {

enum class CharClass : uint8_t { letter, number, space, other };

// Letters (\p{L}) covered: ASCII, Latin-1 and Latin Extended A/B, IPA and spacing modifier
// letters, Latin Extended Additional, Greek (+ extended), Cyrillic (+ supplement), Armenian,
// Hebrew, Arabic letters, Hiragana, Katakana, CJK unified ideographs (+ extension A and
// compatibility), Hangul syllables, fullwidth Latin. Numbers (\p{N}): ASCII digits,
// superscripts/fractions of Latin-1, Arabic-Indic and Devanagari digits, super/subscript
// digits, number forms (fractions, Roman numerals), circled numbers, fullwidth digits.
// Whitespace: Unicode White_Space. Everything else (marks, punctuation, symbols, emoji,
// letters of other scripts) is `other`, which changes only how text is split, never
// whether it round-trips.
CharClass classify(char32_t c);

// Decodes the code point at text[i]; sets length to its byte count. A malformed byte
// decodes as U+FFFD with length 1 (kept byte-exact by the caller's byte spans).
char32_t decode_utf8(std::string_view text, size_t i, size_t& length);

// Splits text into GPT-2 pre-tokens (contiguous byte spans covering the whole text).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace driftless::data
