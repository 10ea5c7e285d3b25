// Text inputs of `driftless prepare`: plain text files (one document each), JSONL (one
// document per line, its "text" field) and fortune files (documents separated by a line
// holding only "%"). Folders expand to their regular files (symlinks and strfile *.dat
// indexes skipped), sorted by name, so the document order is the same on every machine.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace driftless::data {

enum class TextFormat : uint8_t { automatic, text, jsonl, fortune };
TextFormat parse_text_format(const std::string& name);  // auto, text, jsonl, fortune

// Expands files and folders into the sorted list of files to read. Throws on a missing path.
std::vector<std::string> expand_inputs(const std::vector<std::string>& paths);

// `automatic`: *.jsonl / *.json -> jsonl; a file with a line holding only "%" -> fortune;
// otherwise text.
TextFormat detect_format(const std::string& path);

// Calls on_document(text) for each document of the file, then on_bytes(n) with the bytes
// consumed so far (for progress). Empty documents are skipped. JSONL errors name file:line.
void read_documents(const std::string& path, TextFormat format,
                    const std::function<void(const std::string&)>& on_document,
                    const std::function<void(uint64_t)>& on_bytes = nullptr);

}  // namespace driftless::data
