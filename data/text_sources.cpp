// Readers of text inputs (see text_sources.h). Text inputs are small, ordinary files read
// with streams; only the token datasets they produce are memory-mapped.
#include "data/text_sources.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace driftless::data {

namespace fs = std::filesystem;

TextFormat parse_text_format(const std::string& name) {
  if (name == "auto") return TextFormat::automatic;
  if (name == "text") return TextFormat::text;
  if (name == "jsonl") return TextFormat::jsonl;
  if (name == "fortune") return TextFormat::fortune;
  DL_FAIL("prepare", "expected format auto, text, jsonl or fortune, got " << name);
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    DL_CHECK(fs::exists(p), "prepare", "expected an input file or folder, got missing " << p);
    if (!fs::is_directory(p)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> here;
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat")
        here.push_back(e.path().string());
    std::sort(here.begin(), here.end());
    files.insert(files.end(), here.begin(), here.end());
  }
  DL_CHECK(!files.empty(), "prepare", "expected input files, got none");
  return files;
}

TextFormat detect_format(const std::string& path) {
  const auto ext = fs::path(path).extension();
  if (ext == ".jsonl" || ext == ".json") return TextFormat::jsonl;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line == "%") return TextFormat::fortune;
  return TextFormat::text;
}

void read_documents(const std::string& path, TextFormat format,
                    const std::function<void(const std::string&)>& on_document,
                    const std::function<void(uint64_t)>& on_bytes) {
  if (format == TextFormat::automatic) format = detect_format(path);
  std::ifstream in(path, std::ios::binary);
  DL_CHECK(in.good(), "prepare", "expected a readable file, got " << path);
  auto emit = [&](const std::string& doc) {
    if (!doc.empty()) on_document(doc);
  };
  uint64_t bytes = 0;
  if (format == TextFormat::text) {
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    emit(all);
    if (on_bytes) on_bytes(all.size());
    return;
  }
  std::string line, doc;
  for (int64_t ln = 1; std::getline(in, line); ++ln) {
    bytes += line.size() + 1;
    if (format == TextFormat::jsonl) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        DL_FAIL("prepare", path << ":" << ln << ": expected a JSON object, got " << e.what());
      }
      DL_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), "prepare",
               path << ":" << ln << ": expected an object with a string field \"text\"");
      emit(j["text"].get<std::string>());
    } else if (line == "%") {  // fortune separator
      emit(doc);
      doc.clear();
    } else {
      doc += line;
      doc += '\n';
    }
    if (on_bytes && (ln & 255) == 0) on_bytes(bytes);
  }
  emit(doc);
  if (on_bytes) on_bytes(bytes);
}

}  // namespace driftless::data
