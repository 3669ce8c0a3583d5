// Byte-level BPE (tokenizer.json) and the plain byte tokenizer. The BPE follows the tokenizers
// library: added tokens are cut out first and never split, the pre-tokenizer regex (PCRE2 with
// Unicode classes) splits the rest, bytes map to printable characters (GPT-2's table), merges are
// applied by rank, and decoding maps characters back to bytes with a lossy UTF-8 conversion.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <nlohmann/json.hpp>
#include <pcre2.h>

#include <mutex>
#include <unordered_map>

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/base/hash.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/hf/tokenizer_class.h"

namespace rayless {
namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of the UTF-8 sequence starting at s[i] if it is valid, else 0 (Rust's rules: no overlongs,
// no surrogates, nothing above U+10FFFF).
size_t valid_utf8_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + 1 >= s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (i + k >= s.size() || (byte(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

// Like Rust's String::from_utf8_lossy: each maximal invalid prefix of a sequence becomes one U+FFFD.
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t n = valid_utf8_length(bytes, i);
    if (n > 0) {
      out.append(bytes, i, n);
      i += n;
      continue;
    }
    // skip the longest prefix that could have started a valid sequence, then one replacement
    const uint8_t c = static_cast<uint8_t>(bytes[i]);
    size_t skip = 1;
    if (c >= 0xC2 && c <= 0xF4) {
      uint8_t lo = 0x80, hi = 0xBF;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
      const size_t need = c <= 0xDF ? 2 : (c <= 0xEF ? 3 : 4);
      if (i + 1 < bytes.size() && static_cast<uint8_t>(bytes[i + 1]) >= lo && static_cast<uint8_t>(bytes[i + 1]) <= hi) {
        skip = 2;
        while (skip < need && i + skip < bytes.size() && (static_cast<uint8_t>(bytes[i + skip]) & 0xC0) == 0x80) ++skip;
      }
    }
    out += "\xEF\xBF\xBD";
    i += skip;
  }
  return out;
}

// Splits a UTF-8 string into characters (invalid bytes stand alone).
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = valid_utf8_length(s, i);
    if (n == 0) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// GPT-2's byte <-> printable character table.
struct ByteMap {
  std::string byte_to_char[256];
  std::unordered_map<std::string, uint8_t> char_to_byte;
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      std::string ch;
      append_utf8(ch, printable ? static_cast<uint32_t>(b) : next++);
      byte_to_char[b] = ch;
      char_to_byte[ch] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A compiled PCRE2 pattern with Unicode classes; split() returns the matches and the gaps between them.
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      throw InputError(str(where, ": pre-tokenizer regex does not compile at offset ", offset, ": ",
                           reinterpret_cast<char*>(message)));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back to the interpreter
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // (begin, end, is_match) pieces covering the text in order.
  std::vector<std::tuple<size_t, size_t, bool>> split(const std::string& text) const {
    std::vector<std::tuple<size_t, size_t, bool>> pieces;
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t pos = 0, last = 0;
    while (pos <= text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, 0, match, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
      size_t begin = ov[0], end = ov[1];
      if (end == begin) {  // empty match: move on by one character
        if (begin >= text.size()) break;
        size_t n = valid_utf8_length(text, begin);
        pos = begin + (n ? n : 1);
        continue;
      }
      if (begin > last) pieces.emplace_back(last, begin, false);
      pieces.emplace_back(begin, end, true);
      last = pos = end;
    }
    if (last < text.size()) pieces.emplace_back(last, text.size(), false);
    pcre2_match_data_free(match);
    return pieces;
  }

 private:
  pcre2_code* code_ = nullptr;
};

struct AddedToken {
  int64_t id;
  std::string content;
  bool special;
};

// Shared by both tokenizers: cut text at added tokens (longest match at the earliest position).
std::vector<std::pair<std::string, int64_t>> split_on_added(const std::string& text, const std::vector<AddedToken>& added) {
  std::vector<std::pair<std::string, int64_t>> out;  // (plain text, -1) or ("", token id)
  size_t pos = 0, plain_start = 0;
  while (pos < text.size()) {
    const AddedToken* best = nullptr;
    for (const auto& a : added) {
      if (!a.content.empty() && text.compare(pos, a.content.size(), a.content) == 0 &&
          (!best || a.content.size() > best->content.size()))
        best = &a;
    }
    if (best) {
      if (pos > plain_start) out.emplace_back(text.substr(plain_start, pos - plain_start), -1);
      out.emplace_back(std::string(), best->id);
      pos += best->content.size();
      plain_start = pos;
    } else {
      ++pos;
    }
  }
  if (plain_start < text.size()) out.emplace_back(text.substr(plain_start), -1);
  return out;
}

// ---- BPE ---------------------------------------------------------------------------------------

// One pre-tokenizer: a Split (regex or literal), or ByteLevel (a prefix space on every piece that
// lacks one, then GPT-2's regex when use_regex), applied to each piece the steps before it made.
struct SplitStep {
  std::unique_ptr<Regex> regex;
  std::string literal;        // a String pattern
  bool remove = false;        // behavior Removed (else Isolated)
  bool prefix_space = false;  // ByteLevel's add_prefix_space
};

class BpeTokenizer : public Tokenizer {
 public:
  BpeTokenizer(const std::string& json_text, const std::string& where) : text_hash_(fnv1a64_hex(json_text)), json_text_(json_text) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(str(where, ": invalid JSON: ", e.what()));
    }
    try {
      parse(j, where);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(str(where, ": malformed tokenizer.json: ", e.what()));
    }
  }

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    for (const auto& [segment, added_id] : split_on_added(text, added_)) {
      if (added_id >= 0) {
        ids.push_back(added_id);
        continue;
      }
      for (const std::string& piece : pre_tokenize(segment)) {
        std::string mapped;
        for (unsigned char c : piece) mapped += byte_map().byte_to_char[c];
        for (int64_t id : bpe(mapped)) ids.push_back(id);
      }
    }
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    std::string bytes;
    for (int64_t id : ids) {
      auto added = added_by_id_.find(id);
      std::string token;
      if (added != added_by_id_.end()) {
        if (skip_special_tokens && added->second.special) continue;
        token = added->second.content;
      } else if (id >= 0 && id < static_cast<int64_t>(id_to_token_.size()) && !id_to_token_[id].empty()) {
        token = id_to_token_[id];
      } else {
        continue;  // ids past the vocabulary (padding rows of the embedding) decode to nothing
      }
      // every character maps back to a byte, else the token's own UTF-8 (as the ByteLevel decoder does)
      std::string decoded;
      bool all_mapped = true;
      for (const auto& ch : utf8_chars(token)) {
        auto it = byte_map().char_to_byte.find(ch);
        if (it == byte_map().char_to_byte.end()) {
          all_mapped = false;
          break;
        }
        decoded.push_back(static_cast<char>(it->second));
      }
      bytes += all_mapped ? decoded : token;
    }
    return utf8_lossy(bytes);
  }

  std::vector<int64_t> add_special_tokens(std::vector<int64_t> ids) const override {
    if (single_template_.empty()) return ids;
    std::vector<int64_t> out;
    for (const auto& piece : single_template_) {
      if (piece.empty()) out.insert(out.end(), ids.begin(), ids.end());  // the sequence itself ($A)
      else out.insert(out.end(), piece.begin(), piece.end());
    }
    return out;
  }

  std::optional<int64_t> token_to_id(const std::string& token) const override {
    for (const auto& a : added_)
      if (a.content == token) return a.id;
    auto it = vocab_.find(token);
    if (it != vocab_.end()) return it->second;
    return std::nullopt;
  }
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int64_t> eos_ids() const override { return eos_; }
  int64_t pad_id() const override { return pad_; }
  std::string hash() const override { return text_hash_; }
  std::string kind() const override { return "bpe"; }
  std::string to_json() const override { return json_text_; }

  std::string class_origin() const override { return pipeline_.origin(); }
  std::string class_change_note() const override { return pipeline_.change_note(); }

  void set_pipeline(TokenizerPipeline pipeline) {
    pipeline_ = std::move(pipeline);
    pipeline_.tokenizer_json.clear();  // json_text_ holds it
  }
  void set_eos(std::vector<int64_t> eos) { eos_ = std::move(eos); }
  void set_pad(int64_t pad) { pad_ = pad; }

 private:
  void parse(const nlohmann::json& j, const std::string& where) {
    inputCheck(j.is_object() && j.contains("model") && j["model"].is_object(), where, ": no \"model\" object");
    const auto& model = j["model"];
    const std::string type = model.value("type", "BPE");
    inputCheck(type == "BPE", where, ": unsupported model type \"", type, "\" (only byte-level BPE)");
    inputCheck(!model.value("byte_fallback", false), where, ": unsupported byte_fallback BPE (SentencePiece style)");
    inputCheck(model.contains("vocab") && model["vocab"].is_object(), where, ": model.vocab must be an object");
    ignore_merges_ = model.value("ignore_merges", false);
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
      inputCheck(it->is_number_integer() && it->get<int64_t>() >= 0, where, ": vocab entry \"", it.key(), "\" needs a non-negative id");
      vocab_[it.key()] = it->get<int64_t>();
    }
    int64_t max_id = -1;
    for (const auto& [token, id] : vocab_) max_id = std::max(max_id, id);
    if (model.contains("merges") && !model["merges"].is_null()) {
      inputCheck(model["merges"].is_array(), where, ": model.merges must be an array");
      int64_t rank = 0;
      for (const auto& m : model["merges"]) {
        std::string a, b;
        if (m.is_string()) {
          const std::string s = m.get<std::string>();
          const size_t space = s.find(' ', 1);
          inputCheck(space != std::string::npos, where, ": merge \"", s, "\" is not two tokens");
          a = s.substr(0, space);
          b = s.substr(space + 1);
        } else {
          inputCheck(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where, ": merge #", rank,
                     " must be \"a b\" or [a, b]");
          a = m[0].get<std::string>();
          b = m[1].get<std::string>();
        }
        inputCheck(vocab_.count(a + b), where, ": merge #", rank, " (", a, " ", b, ") makes a token not in the vocabulary");
        merge_rank_.emplace(a + '\x01' + b, rank++);  // \x01 cannot occur inside a byte-level token
      }
    }
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& a : j["added_tokens"]) {
        inputCheck(a.contains("id") && a["id"].is_number_integer() && a.contains("content") && a["content"].is_string(),
                   where, ": added_tokens entries need id and content");
        AddedToken t{a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false)};
        added_.push_back(t);
        added_by_id_[t.id] = t;
        max_id = std::max(max_id, t.id);
      }
    }
    vocab_size_ = max_id + 1;
    id_to_token_.assign(static_cast<size_t>(vocab_size_), std::string());
    for (const auto& [token, id] : vocab_) id_to_token_[id] = token;

    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const std::string n = j["normalizer"].value("type", "");
      // NFC: the input is taken to be NFC already (true of nearly all text); documented in docs/models.md
      inputCheck(n == "NFC", where, ": unsupported normalizer \"", n, "\" (supported: none, NFC)");
    }
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) parse_pre_tokenizer(j["pre_tokenizer"], where);
    if (j.contains("post_processor") && !j["post_processor"].is_null()) parse_post_processor(j["post_processor"], where);
    if (j.contains("decoder") && !j["decoder"].is_null()) {
      const std::string d = j["decoder"].value("type", "");
      inputCheck(d == "ByteLevel", where, ": unsupported decoder \"", d, "\" (supported: ByteLevel)");
    }
    // last (the checks above say more about a broken file): every piece of text is mapped byte by byte
    // to GPT-2's printable characters before the merges, so a vocabulary without one of the 256 would
    // leave some text with no token (found by fuzzing: an error in the middle of a run, not at start)
    for (int b = 0; b < 256; ++b)
      inputCheck(vocab_.count(byte_map().byte_to_char[b]), where, ": model.vocab has no token for byte 0x", std::hex, b,
                 std::dec, " (\"", byte_map().byte_to_char[b], "\"): a byte-level BPE vocabulary needs all 256");
  }

  // TemplateProcessing (alone or inside a Sequence, as Llama 3 has it beside ByteLevel): its "single"
  // template becomes single_template_, one entry per item, an empty entry standing for the sequence.
  // ByteLevel changes offsets only, not ids.
  void parse_post_processor(const nlohmann::json& p, const std::string& where) {
    const std::string type = p.value("type", "");
    if (type == "Sequence") {
      inputCheck(p.contains("processors") && p["processors"].is_array(), where, ": post_processor Sequence needs processors");
      for (const auto& q : p["processors"]) parse_post_processor(q, where);
      return;
    }
    if (type == "ByteLevel") return;
    inputCheck(type == "TemplateProcessing", where, ": unsupported post_processor \"", type,
               "\" (supported: TemplateProcessing, ByteLevel, Sequence of them)");
    inputCheck(p.contains("single") && p["single"].is_array(), where, ": post_processor TemplateProcessing needs \"single\"");
    const nlohmann::json specials = p.value("special_tokens", nlohmann::json::object());
    single_template_.clear();
    for (const auto& item : p["single"]) {
      if (item.contains("Sequence")) {
        single_template_.emplace_back();
        continue;
      }
      inputCheck(item.contains("SpecialToken") && item["SpecialToken"].contains("id"), where,
                 ": post_processor template item must be a Sequence or a SpecialToken");
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<int64_t> ids;
      if (specials.contains(name) && specials[name].contains("ids")) {
        ids = specials[name]["ids"].get<std::vector<int64_t>>();
      } else {
        auto id = token_to_id(name);
        inputCheck(id.has_value(), where, ": post_processor names special token \"", name, "\", which the tokenizer lacks");
        ids = {*id};
      }
      single_template_.push_back(ids);
    }
  }

  void parse_pre_tokenizer(const nlohmann::json& p, const std::string& where) {
    const std::string type = p.value("type", "");
    if (type == "Sequence") {
      inputCheck(p.contains("pretokenizers") && p["pretokenizers"].is_array(), where, ": Sequence pre-tokenizer needs pretokenizers");
      for (const auto& q : p["pretokenizers"]) parse_pre_tokenizer(q, where);
    } else if (type == "ByteLevel") {
      SplitStep step;
      step.prefix_space = p.value("add_prefix_space", false);
      if (p.value("use_regex", true)) step.regex = std::make_unique<Regex>(kGpt2Pattern, where);
      if (step.regex || step.prefix_space) splits_.push_back(std::move(step));
    } else if (type == "Split") {
      inputCheck(p.contains("pattern") && p["pattern"].is_object(), where, ": Split pre-tokenizer needs a pattern");
      const std::string behavior = p.value("behavior", "Isolated");
      inputCheck(behavior == "Isolated" || behavior == "Removed", where, ": unsupported Split behavior \"", behavior,
                 "\" (supported: Isolated, Removed)");
      inputCheck(!p.value("invert", false), where, ": unsupported inverted Split pre-tokenizer");
      SplitStep step;
      step.remove = behavior == "Removed";
      if (p["pattern"].contains("Regex")) step.regex = std::make_unique<Regex>(p["pattern"]["Regex"].get<std::string>(), where);
      else step.literal = p["pattern"].at("String").get<std::string>();
      inputCheck(step.regex || !step.literal.empty(), where, ": empty Split pattern");
      splits_.push_back(std::move(step));
    } else {
      throw InputError(str(where, ": unsupported pre-tokenizer \"", type, "\" (supported: ByteLevel, Split, Sequence)"));
    }
  }

  std::vector<std::string> pre_tokenize(const std::string& text) const {
    std::vector<std::string> pieces{text};
    for (const auto& step : splits_) {
      std::vector<std::string> next;
      for (const auto& original : pieces) {
        const std::string piece = step.prefix_space && !original.empty() && original[0] != ' ' ? " " + original : original;
        if (step.regex) {
          for (const auto& [b, e, is_match] : step.regex->split(piece))
            if (!(step.remove && is_match)) next.push_back(piece.substr(b, e - b));
        } else if (step.literal.empty()) {
          next.push_back(piece);  // ByteLevel without its regex
        } else {
          size_t pos = 0;
          for (size_t f = piece.find(step.literal); f != std::string::npos; f = piece.find(step.literal, pos)) {
            if (f > pos) next.push_back(piece.substr(pos, f - pos));
            if (!step.remove) next.push_back(step.literal);
            pos = f + step.literal.size();
          }
          if (pos < piece.size()) next.push_back(piece.substr(pos));
        }
      }
      pieces = std::move(next);
    }
    return pieces;
  }

  std::vector<int64_t> bpe(const std::string& word) const {
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      auto cached = cache_.find(word);
      if (cached != cache_.end()) return cached->second;
    }
    std::vector<int64_t> ids;
    auto whole = vocab_.find(word);
    if (ignore_merges_ && whole != vocab_.end()) {
      ids.push_back(whole->second);
    } else {
      std::vector<std::string> symbols = utf8_chars(word);
      while (symbols.size() > 1) {
        int64_t best_rank = std::numeric_limits<int64_t>::max();
        size_t best = 0;
        for (size_t i = 0; i + 1 < symbols.size(); ++i) {
          auto r = merge_rank_.find(symbols[i] + '\x01' + symbols[i + 1]);
          if (r != merge_rank_.end() && r->second < best_rank) {
            best_rank = r->second;
            best = i;
          }
        }
        if (best_rank == std::numeric_limits<int64_t>::max()) break;
        // merge every occurrence of the best pair, left to right
        const std::string a = symbols[best], b = symbols[best + 1];
        std::vector<std::string> merged;
        for (size_t i = 0; i < symbols.size();) {
          if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
            merged.push_back(a + b);
            i += 2;
          } else {
            merged.push_back(symbols[i++]);
          }
        }
        symbols = std::move(merged);
      }
      for (const auto& s : symbols) {
        auto it = vocab_.find(s);
        runtimeCheck(it != vocab_.end(), "BPE symbol not in the vocabulary: ", s);  // impossible with a byte-complete vocab
        ids.push_back(it->second);
      }
    }
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < 200000) cache_.emplace(word, ids);
    return ids;
  }

  std::string text_hash_, json_text_;
  TokenizerPipeline pipeline_{"TokenizersBackend", "a tokenizer.json alone", "", {}};
  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int64_t> merge_rank_;
  std::vector<AddedToken> added_;
  std::unordered_map<int64_t, AddedToken> added_by_id_;
  std::vector<SplitStep> splits_;
  bool ignore_merges_ = false;
  int64_t vocab_size_ = 0;
  std::vector<int64_t> eos_;
  int64_t pad_ = 0;
  std::vector<std::vector<int64_t>> single_template_;  // post-processor; an empty entry = the sequence
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

// ---- byte tokenizer ----------------------------------------------------------------------------

const std::vector<AddedToken>& byte_specials() {
  static const std::vector<AddedToken> specials = {
      {256, "<|pad|>", true}, {257, "<|bos|>", true}, {258, "<|eos|>", true}, {259, "<|im_start|>", true}, {260, "<|im_end|>", true}};
  return specials;
}

// The byte tokenizer written as a tokenizer.json (a BPE without merges over GPT-2's byte characters),
// so transformers can load a directory rayless saved and gets the same ids.
std::string byte_tokenizer_json() {
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::ordered_json::array();
  for (const auto& s : byte_specials())
    j["added_tokens"].push_back({{"id", s.id}, {"content", s.content}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_map().byte_to_char[b]] = b;
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", nlohmann::ordered_json::array()}};
  return j.dump(2);
}

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    for (const auto& [segment, added_id] : split_on_added(text, byte_specials())) {
      if (added_id >= 0) ids.push_back(added_id);
      for (unsigned char c : segment) ids.push_back(c);
    }
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    std::string bytes;
    for (int64_t id : ids) {
      if (id >= 0 && id < 256) bytes.push_back(static_cast<char>(id));
      else if (id >= 256 && id < 261 && !skip_special_tokens) bytes += byte_specials()[id - 256].content;
    }
    return utf8_lossy(bytes);
  }
  std::optional<int64_t> token_to_id(const std::string& token) const override {
    for (const auto& s : byte_specials())
      if (s.content == token) return s.id;
    if (token.size() == 1) return static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }
  int64_t vocab_size() const override { return 261; }
  std::vector<int64_t> eos_ids() const override { return {258, 260}; }
  int64_t pad_id() const override { return 256; }
  std::string hash() const override { return fnv1a64_hex(byte_tokenizer_json()); }
  std::string kind() const override { return "byte"; }
  std::string to_json() const override { return byte_tokenizer_json(); }
};

std::optional<nlohmann::json> read_json_if_exists(const std::filesystem::path& file) {
  if (file.empty() || !std::filesystem::exists(file)) return std::nullopt;
  try {
    return nlohmann::json::parse(read_text_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(file.string(), ": invalid JSON: ", e.what()));
  }
}

std::vector<int64_t> ids_from(const nlohmann::json& j, const char* key) {
  std::vector<int64_t> ids;
  if (!j.is_object() || !j.contains(key)) return ids;
  const auto& v = j[key];
  if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) ids.push_back(e.get<int64_t>());
  return ids;
}

}  // namespace

std::shared_ptr<Tokenizer> make_byte_tokenizer() { return std::make_shared<ByteTokenizer>(); }

std::shared_ptr<Tokenizer> parse_bpe_tokenizer(const std::string& json_text, const std::string& where) {
  auto tokenizer = std::make_shared<BpeTokenizer>(json_text, where);
  // defaults from well-known special tokens; load_tokenizer refines them from the model directory
  std::vector<int64_t> eos;
  for (const char* name : {"<|im_end|>", "<|endoftext|>", "<|eos|>", "<|end_of_text|>", "<|eot_id|>", "</s>"})
    if (auto id = tokenizer->token_to_id(name)) eos.push_back(*id);
  tokenizer->set_eos(eos);
  int64_t pad = eos.empty() ? 0 : eos.front();
  for (const char* name : {"<|pad|>", "<|endoftext|>"})
    if (auto id = tokenizer->token_to_id(name)) {
      pad = *id;
      break;
    }
  tokenizer->set_pad(pad);
  return tokenizer;
}

std::shared_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::filesystem::path& model_dir) {
  if (path == "byte") return make_byte_tokenizer();
  const std::filesystem::path file = path.empty() ? model_dir / "tokenizer.json" : std::filesystem::path(path);
  inputCheck(std::filesystem::exists(file), file.string(), ": tokenizer file not found",
             path.empty() ? " (set tokenizer.path, or \"byte\" for the byte-level tokenizer)" : "");
  // the class transformers loads for the tokenizer's directory decides the pipeline (tokenizer_class.h)
  const std::filesystem::path tokenizer_dir =
      path.empty() ? model_dir : (file.has_parent_path() ? file.parent_path() : std::filesystem::path("."));
  TokenizerPipeline pipeline = resolve_tokenizer_pipeline(read_text_file(file), file.string(), tokenizer_dir);
  auto tokenizer = std::static_pointer_cast<BpeTokenizer>(parse_bpe_tokenizer(pipeline.tokenizer_json, file.string()));
  tokenizer->set_pipeline(std::move(pipeline));
  if (!model_dir.empty()) {
    // eos: generation_config.json, then config.json; pad: tokenizer_config.json's pad_token
    std::vector<int64_t> eos;
    if (auto gen = read_json_if_exists(model_dir / "generation_config.json")) eos = ids_from(*gen, "eos_token_id");
    if (eos.empty())
      if (auto cfg = read_json_if_exists(model_dir / "config.json")) eos = ids_from(*cfg, "eos_token_id");
    if (!eos.empty()) tokenizer->set_eos(eos);
    if (auto tc = read_json_if_exists(model_dir / "tokenizer_config.json")) {
      if (tc->contains("pad_token") && (*tc)["pad_token"].is_string())
        if (auto id = tokenizer->token_to_id((*tc)["pad_token"].get<std::string>())) tokenizer->set_pad(*id);
    }
  }
  inputCheck(!tokenizer->eos_ids().empty(), file.string(), ": no end-of-sequence token found (set generation.eos_token_ids)");
  return tokenizer;
}

}  // namespace rayless
