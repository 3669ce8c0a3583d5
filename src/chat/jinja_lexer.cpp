// Lexer: splits a template into data and the tokens inside {{ }}, {% %}; drops {# #} comments. It
// applies jinja2's whitespace rules as transformers configures them: trim_blocks, lstrip_blocks, the
// `-`/`+` markers, newlines normalised to "\n", and one trailing newline of the source dropped.
#include "chat/jinja_internal.h"

#include <cctype>
#include <cstring>

namespace rayless::jinja::detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// jinja2 joins the source's lines with "\n" and, without keep_trailing_newline, drops one final one.
std::string normalise_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}
  std::vector<Token> run();

 private:
  void emit_data(std::string text, std::size_t start);
  std::string strip_before_tag(std::string text, char sign, bool is_variable) const;
  void lex_comment(std::size_t content);
  void lex_raw(std::size_t after_begin);
  void lex_tag(bool is_block);
  bool at_tag_end(bool is_block);
  void lex_string();
  void lex_number();
  void lex_operator();
  void advance_to(std::size_t pos);
  bool starts_with(const char* s, std::size_t at) const { return src_.compare(at, std::strlen(s), s) == 0; }
  std::size_t skip_spaces(std::size_t at) const {
    while (at < src_.size() && is_space(src_[at])) ++at;
    return at;
  }
  [[noreturn]] void error(const std::string& why) const { throw TemplateError(why, line_); }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the previous token ended a line (lstrip_blocks may strip)
  std::vector<Token> tokens_;
};

void Lexer::advance_to(std::size_t pos) {
  for (std::size_t i = pos_; i < pos && i < src_.size(); ++i)
    if (src_[i] == '\n') ++line_;
  pos_ = pos;
}

void Lexer::emit_data(std::string text, std::size_t /*start*/) {
  if (text.empty()) return;
  tokens_.push_back(Token{Tok::Data, std::move(text), 0, 0, line_});  // callers sit at `start`
}

// `-` strips all whitespace before the tag; lstrip_blocks strips a line's indentation before a block
// or comment tag (not before {{ }}, and not with `+`).
std::string Lexer::strip_before_tag(std::string text, char sign, bool is_variable) const {
  if (sign == '-') {
    std::size_t end = text.size();
    while (end > 0 && is_space(text[end - 1])) --end;
    return text.substr(0, end);
  }
  if (sign == '+' || is_variable) return text;
  std::size_t line_start = text.rfind('\n');
  line_start = line_start == std::string::npos ? 0 : line_start + 1;
  if (line_start == 0 && !line_starting_) return text;
  if (line_start == text.size()) return text;
  for (std::size_t i = line_start; i < text.size(); ++i)
    if (!is_space(text[i])) return text;
  return text.substr(0, line_start);
}

std::vector<Token> Lexer::run() {
  while (pos_ < src_.size()) {
    std::size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= src_.size()) break;
      char c = src_[tag + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++tag;
    }
    if (tag == std::string::npos || tag + 1 >= src_.size()) {
      emit_data(src_.substr(pos_), pos_);
      advance_to(src_.size());
      break;
    }
    char kind = src_[tag + 1];
    char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
    emit_data(strip_before_tag(src_.substr(pos_, tag - pos_), sign, kind == '{'), pos_);
    advance_to(tag);
    std::size_t after = tag + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      lex_comment(after);
      continue;
    }
    std::size_t word = skip_spaces(after);
    if (kind == '%' && starts_with("raw", word) && !(word + 3 < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[word + 3])) || src_[word + 3] == '_'))) {
      lex_raw(word + 3);
      continue;
    }
    tokens_.push_back(Token{kind == '%' ? Tok::BlockBegin : Tok::VarBegin, "", 0, 0, line_});
    advance_to(after);
    lex_tag(kind == '%');
  }
  tokens_.push_back(Token{Tok::End, "", 0, 0, line_});
  return std::move(tokens_);
}

void Lexer::lex_comment(std::size_t content) {
  std::size_t close = src_.find("#}", content);
  if (close == std::string::npos) error("Missing end of comment tag");
  std::size_t end = close + 2;
  if (close > content && src_[close - 1] == '-') {
    end = skip_spaces(end);
  } else if (!(close > content && src_[close - 1] == '+') && end < src_.size() && src_[end] == '\n') {
    ++end;  // trim_blocks
  }
  advance_to(end);
  line_starting_ = end > 0 && src_[end - 1] == '\n';
}

// {% raw %}...{% endraw %}: the text between is data, untouched except for the tags' own stripping.
void Lexer::lex_raw(std::size_t after_word) {
  std::size_t p = skip_spaces(after_word);
  if (starts_with("-%}", p)) {
    p = skip_spaces(p + 3);
  } else if (starts_with("%}", p)) {
    p += 2;
  } else {
    error("Expected the end of the raw tag");
  }
  advance_to(p);
  std::size_t search = p;
  while (true) {
    std::size_t open = src_.find("{%", search);
    if (open == std::string::npos) error("Missing end of raw directive");
    std::size_t q = open + 2;
    char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
    if (sign) ++q;
    q = skip_spaces(q);
    if (!starts_with("endraw", q)) {
      search = open + 2;
      continue;
    }
    q = skip_spaces(q + 6);
    std::size_t end;
    if (starts_with("-%}", q)) {
      end = skip_spaces(q + 3);
    } else if (starts_with("+%}", q)) {
      end = q + 3;
    } else if (starts_with("%}", q)) {
      end = q + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;
    } else {
      error("Expected the end of the endraw tag");
    }
    emit_data(strip_before_tag(src_.substr(p, open - p), sign, false), p);
    advance_to(end);
    line_starting_ = src_[end - 1] == '\n';
    return;
  }
}

bool Lexer::at_tag_end(bool is_block) {
  const char* close = is_block ? "%}" : "}}";
  std::size_t end;
  if ((src_[pos_] == '-' || src_[pos_] == '+') && starts_with(close, pos_ + 1)) {
    if (src_[pos_] == '+' && !is_block) return false;
    end = pos_ + 3;
    if (src_[pos_] == '-') end = skip_spaces(end);
  } else if (starts_with(close, pos_)) {
    end = pos_ + 2;
    if (is_block && end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
  } else {
    return false;
  }
  tokens_.push_back(Token{is_block ? Tok::BlockEnd : Tok::VarEnd, "", 0, 0, line_});
  advance_to(end);
  line_starting_ = src_[end - 1] == '\n';
  return true;
}

void Lexer::lex_tag(bool is_block) {
  while (true) {
    advance_to(skip_spaces(pos_));
    if (pos_ >= src_.size()) error(is_block ? "Unexpected end of template. Missing '%}'." : "Unexpected end of template. Missing '}}'.");
    if (at_tag_end(is_block)) return;
    char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t end = pos_;
      while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
      tokens_.push_back(Token{Tok::Name, src_.substr(pos_, end - pos_), 0, 0, line_});
      advance_to(end);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
    } else if (c == '\'' || c == '"') {
      lex_string();
    } else {
      lex_operator();
    }
  }
}

void Lexer::lex_number() {
  std::size_t p = pos_;
  auto digits = [&](std::size_t at) {
    while (at < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[at])) || (src_[at] == '_' && at + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[at + 1]))))) ++at;
    return at;
  };
  p = digits(p);
  bool is_float = false;
  bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';  // `x.0` is item 0, not a float
  if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
    p = digits(p + 1);
    is_float = true;
  }
  if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
    std::size_t q = p + 1;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
      p = digits(q);
      is_float = true;
    }
  }
  std::string text;
  for (std::size_t i = pos_; i < p; ++i)
    if (src_[i] != '_') text += src_[i];
  Token t{is_float ? Tok::Float : Tok::Int, text, 0, 0, line_};
  if (is_float) t.number = std::strtod(text.c_str(), nullptr);
  else t.integer = std::strtoll(text.c_str(), nullptr, 10);
  tokens_.push_back(t);
  advance_to(p);
}

void append_utf8(std::string& out, unsigned long cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes one backslash escape the way Python's unicode-escape codec does; returns chars consumed.
std::size_t decode_escape(const std::string& s, std::size_t i, std::string& out) {
  char c = s[i];
  static const char* simple_from = "ntr\\'\"abfv";
  static const char* simple_to = "\n\t\r\\'\"\a\b\f\v";
  if (const char* hit = std::strchr(simple_from, c); hit && c) {
    out += simple_to[hit - simple_from];
    return 1;
  }
  if (c == '\n') return 1;  // backslash-newline continues the line
  int hex_len = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
  if (hex_len) {
    std::string hex = s.substr(i + 1, hex_len);
    if (static_cast<int>(hex.size()) == hex_len && hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
      append_utf8(out, std::stoul(hex, nullptr, 16));
      return 1 + hex_len;
    }
    throw TemplateError("invalid escape in string literal");
  }
  if (c >= '0' && c <= '7') {
    std::size_t n = 0;
    unsigned long v = 0;
    while (n < 3 && i + n < s.size() && s[i + n] >= '0' && s[i + n] <= '7') v = v * 8 + (s[i + n++] - '0');
    append_utf8(out, v);
    return n;
  }
  out += '\\';
  out += c;
  return 1;
}

void Lexer::lex_string() {
  char quote = src_[pos_];
  std::string value;
  std::size_t p = pos_ + 1;
  while (true) {
    if (p >= src_.size()) error("unexpected char '" + std::string(1, quote) + "'");
    char c = src_[p];
    if (c == quote) break;
    if (c == '\\' && p + 1 < src_.size()) {
      try {
        p += 1 + decode_escape(src_, p + 1, value);
      } catch (const TemplateError& e) {
        error(e.what());
      }
      continue;
    }
    value += c;
    ++p;
  }
  tokens_.push_back(Token{Tok::String, value, 0, 0, line_});
  advance_to(p + 1);
}

void Lexer::lex_operator() {
  static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
  for (const char* op : two) {
    if (starts_with(op, pos_)) {
      tokens_.push_back(Token{Tok::Op, op, 0, 0, line_});
      advance_to(pos_ + 2);
      return;
    }
  }
  char c = src_[pos_];
  if (std::strchr("+-*/%~<>=()[]{},.:|;", c) == nullptr) error(std::string("unexpected char '") + c + "'");
  tokens_.push_back(Token{Tok::Op, std::string(1, c), 0, 0, line_});
  advance_to(pos_ + 1);
}

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalise_newlines(source)).run(); }

}  // namespace rayless::jinja::detail
