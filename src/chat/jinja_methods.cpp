// Methods templates call on values, with Python's behaviour: str (strip, split, startswith, replace,
// format, ...), dict (items, keys, values, get) and list/tuple (index, count). Case mapping is ASCII.
#include "chat/jinja_internal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

namespace rayless::jinja::detail {
namespace {

bool is_py_space(const std::string& ch) {
  if (ch.size() == 1) {
    unsigned char c = ch[0];
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
  }
  static const char* wide[] = {"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",
                               "\xe2\x81\x9f", "\xe3\x80\x80"};
  for (const char* w : wide)
    if (ch == w) return true;
  // U+2000..U+200A
  return ch.size() == 3 && static_cast<unsigned char>(ch[0]) == 0xe2 && static_cast<unsigned char>(ch[1]) == 0x80 &&
         static_cast<unsigned char>(ch[2]) >= 0x80 && static_cast<unsigned char>(ch[2]) <= 0x8a;
}

std::string join_range(const std::vector<std::string>& chars, std::size_t from, std::size_t to) {
  std::string out;
  for (std::size_t i = from; i < to; ++i) out += chars[i];
  return out;
}

const std::string& need_string(const Value& v, const char* what) {
  if (!v.is_string()) fail(std::string(what) + " arg must be None or str");
  return v.text;
}

bool absent(const Value* v) { return v == nullptr || v->is_none() || v->is_undefined(); }

}  // namespace

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<std::string> cps = code_points(s);
  std::vector<std::string> set;
  bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) set = code_points(need_string(chars, "strip"));
  auto strip_it = [&](const std::string& c) {
    return whitespace ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  std::size_t from = 0, to = cps.size();
  if (left)
    while (from < to && strip_it(cps[from])) ++from;
  if (right)
    while (to > from && strip_it(cps[to - 1])) --to;
  return join_range(cps, from, to);
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {
    std::vector<std::string> cps = code_points(s);
    std::size_t i = 0;
    while (true) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
        out.push_back(join_range(cps, i, cps.size()));  // the rest keeps its trailing whitespace
        break;
      }
      std::size_t j = i;
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
      out.push_back(join_range(cps, i, j));
      i = j;
    }
    return out;
  }
  const std::string& delim = need_string(sep, "split");
  if (delim.empty()) fail("empty separator");
  std::size_t start = 0;
  while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
    std::size_t hit = s.find(delim, start);
    if (hit == std::string::npos) break;
    out.push_back(s.substr(start, hit - start));
    start = hit + delim.size();
  }
  out.push_back(s.substr(start));
  return out;
}

namespace {

std::vector<std::string> py_rsplit(const std::string& s, const Value& sep, std::int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, -1);
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {
    std::vector<std::string> cps = code_points(s);
    std::size_t end = cps.size();
    while (true) {
      while (end > 0 && is_py_space(cps[end - 1])) --end;
      if (end == 0) break;
      if (static_cast<std::int64_t>(out.size()) == maxsplit) {
        out.push_back(join_range(cps, 0, end));  // the rest keeps its leading whitespace
        break;
      }
      std::size_t from = end;
      while (from > 0 && !is_py_space(cps[from - 1])) --from;
      out.push_back(join_range(cps, from, end));
      end = from;
    }
  } else {
    const std::string& delim = need_string(sep, "rsplit");
    if (delim.empty()) fail("empty separator");
    std::size_t end = s.size();
    while (static_cast<std::int64_t>(out.size()) < maxsplit && end >= delim.size()) {
      std::size_t hit = s.rfind(delim, end - delim.size());
      if (hit == std::string::npos) break;
      out.push_back(s.substr(hit + delim.size(), end - hit - delim.size()));
      end = hit;
    }
    out.push_back(s.substr(0, end));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> cps = code_points(s), out;
  static const std::vector<std::string> breaks = {"\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\xc2\x85", "\xe2\x80\xa8", "\xe2\x80\xa9"};
  std::string line;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (std::find(breaks.begin(), breaks.end(), cps[i]) == breaks.end()) {
      line += cps[i];
      continue;
    }
    std::string brk = cps[i];
    if (cps[i] == "\r" && i + 1 < cps.size() && cps[i + 1] == "\n") brk += cps[++i];
    out.push_back(keepends ? line + brk : line);
    line.clear();
  }
  if (!line.empty()) out.push_back(line);
  return out;
}

}  // namespace

std::string py_upper(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
std::string py_lower(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
std::string py_capitalize(const std::string& s) {
  std::string out = py_lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
// str.title(): a letter after a non-letter starts a word.
std::string py_title(const std::string& s) {
  std::string out = s;
  bool previous_cased = false;
  for (char& c : out) {
    bool cased = std::isalpha(static_cast<unsigned char>(c));
    if (cased) c = static_cast<char>(previous_cased ? std::tolower(static_cast<unsigned char>(c)) : std::toupper(static_cast<unsigned char>(c)));
    previous_cased = cased;
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& with, std::int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` between every character
    auto cps = code_points(s);
    std::int64_t done = 0;
    for (std::size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) out += with, ++done;
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    std::size_t hit = s.find(old, start);
    if (hit == std::string::npos) break;
    out += s.substr(start, hit - start) + with;
    start = hit + old.size();
    ++done;
  }
  return out + s.substr(start);
}

namespace {

std::int64_t int_arg(const CallArgs& a, std::size_t i, const char* name, std::int64_t fallback) {
  const Value* v = a.get(i, name);
  if (absent(v)) return fallback;
  if (!v->is_integral()) fail("'" + type_name(*v) + "' object cannot be interpreted as an integer");
  return v->as_int();
}

Value string_list(const std::vector<std::string>& parts) {
  List out;
  for (const auto& p : parts) out.push_back(Value::from(p));
  return Value::from(std::move(out));
}

// startswith / endswith: a prefix or a tuple of them.
bool affix_match(const std::string& s, const Value& affix, bool at_start) {
  if (affix.is_list()) {
    for (const auto& a : *affix.list)
      if (affix_match(s, a, at_start)) return true;
    return false;
  }
  if (!affix.is_string()) fail(std::string(at_start ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " + type_name(affix));
  const std::string& a = affix.text;
  if (a.size() > s.size()) return false;
  return at_start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!pred(c)) return false;
  return true;
}

std::string pad(const std::string& s, std::int64_t width, const std::string& fill, int align) {
  std::int64_t len = static_cast<std::int64_t>(py_len(s));
  if (width <= len) return s;
  std::int64_t total = width - len;
  std::int64_t left = align < 0 ? 0 : align > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

std::string format_field(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  std::size_t i = 0;
  std::string fill = " ";
  int align = v.is_number() ? 1 : -1;
  auto align_of = [](char c) { return c == '<' ? -1 : c == '>' ? 1 : c == '^' ? 0 : 2; };
  if (spec.size() > 1 && align_of(spec[1]) != 2) fill = spec.substr(0, 1), align = align_of(spec[1]), i = 2;
  else if (align_of(spec[0]) != 2) align = align_of(spec[0]), i = 1;
  std::int64_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + (spec[i++] - '0');
  std::string rest = spec.substr(i), text;
  if (!rest.empty() && (rest.back() == 'f' || rest.back() == 'e' || rest.back() == 'g' || rest.back() == '%')) {
    char buf[128];
    std::snprintf(buf, sizeof buf, ("%" + rest).c_str(), v.as_double());
    text = buf;
  } else {
    text = to_str(v);
  }
  return pad(text, width, fill, align);
}

// str.format with positional {} {0} and named {name} fields, !r / !s and simple format specs.
std::string py_str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c, ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1), spec, conv;
    if (auto colon = field.find(':'); colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    if (auto bang = field.find('!'); bang != std::string::npos) conv = field.substr(bang + 1), field.resize(bang);
    const Value* v = nullptr;
    if (field.empty()) v = a.get(auto_index++, "");
    else if (std::isdigit(static_cast<unsigned char>(field[0]))) v = a.get(std::stoul(field), "");
    else v = a.get(static_cast<std::size_t>(-1), field);
    if (!v) fail(field.empty() || std::isdigit(static_cast<unsigned char>(field[0])) ? "Replacement index out of range" : string_repr(field));
    out += conv == "r" ? format_field(Value::from(repr(*v)), spec) : format_field(*v, spec);
    i = close;
  }
  return out;
}

Value find_method(const std::string& s, const CallArgs& a, bool from_right) {
  const Value* sub = a.get(0, "sub");
  if (!sub || !sub->is_string()) fail("must be str");
  std::size_t hit = from_right ? s.rfind(sub->text) : s.find(sub->text);
  if (hit == std::string::npos) return Value::from(std::int64_t{-1});
  return Value::from(static_cast<std::int64_t>(py_len(s.substr(0, hit))));
}

Value partition(const std::string& s, const std::string& sep, bool from_right) {
  if (sep.empty()) fail("empty separator");
  std::size_t hit = from_right ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos)
    return from_right ? Value::from(List{Value::from(""), Value::from(""), Value::from(s)}, true)
                      : Value::from(List{Value::from(s), Value::from(""), Value::from("")}, true);
  return Value::from(List{Value::from(s.substr(0, hit)), Value::from(sep), Value::from(s.substr(hit + sep.size()))}, true);
}

using StrMethod = Value (*)(const std::string&, const CallArgs&);

const std::map<std::string, StrMethod>& string_methods() {
  static const std::map<std::string, StrMethod> methods = {
      {"strip", [](const std::string& s, const CallArgs& a) { const Value* c = a.get(0, "chars"); return Value::from(py_strip(s, c ? *c : Value::none(), true, true)); }},
      {"lstrip", [](const std::string& s, const CallArgs& a) { const Value* c = a.get(0, "chars"); return Value::from(py_strip(s, c ? *c : Value::none(), true, false)); }},
      {"rstrip", [](const std::string& s, const CallArgs& a) { const Value* c = a.get(0, "chars"); return Value::from(py_strip(s, c ? *c : Value::none(), false, true)); }},
      {"split", [](const std::string& s, const CallArgs& a) { const Value* sep = a.get(0, "sep"); return string_list(py_split(s, sep ? *sep : Value::none(), int_arg(a, 1, "maxsplit", -1))); }},
      {"rsplit", [](const std::string& s, const CallArgs& a) { const Value* sep = a.get(0, "sep"); return string_list(py_rsplit(s, sep ? *sep : Value::none(), int_arg(a, 1, "maxsplit", -1))); }},
      {"splitlines", [](const std::string& s, const CallArgs& a) { const Value* k = a.get(0, "keepends"); return string_list(py_splitlines(s, k && truthy(*k))); }},
      {"startswith", [](const std::string& s, const CallArgs& a) { const Value* p = a.get(0, "prefix"); if (!p) fail("startswith() takes at least 1 argument (0 given)"); return Value::from(affix_match(s, *p, true)); }},
      {"endswith", [](const std::string& s, const CallArgs& a) { const Value* p = a.get(0, "suffix"); if (!p) fail("endswith() takes at least 1 argument (0 given)"); return Value::from(affix_match(s, *p, false)); }},
      {"upper", [](const std::string& s, const CallArgs&) { return Value::from(py_upper(s)); }},
      {"lower", [](const std::string& s, const CallArgs&) { return Value::from(py_lower(s)); }},
      {"casefold", [](const std::string& s, const CallArgs&) { return Value::from(py_lower(s)); }},
      {"title", [](const std::string& s, const CallArgs&) { return Value::from(py_title(s)); }},
      {"capitalize", [](const std::string& s, const CallArgs&) { return Value::from(py_capitalize(s)); }},
      {"swapcase", [](const std::string& s, const CallArgs&) { std::string o = s; for (char& c : o) c = std::isupper(static_cast<unsigned char>(c)) ? std::tolower(c) : std::toupper(c); return Value::from(o); }},
      {"replace", [](const std::string& s, const CallArgs& a) { const Value* o = a.get(0, "old"); const Value* n = a.get(1, "new"); if (!o || !n || !o->is_string() || !n->is_string()) fail("replace() arguments must be str"); return Value::from(py_replace(s, o->text, n->text, int_arg(a, 2, "count", -1))); }},
      {"find", [](const std::string& s, const CallArgs& a) { return find_method(s, a, false); }},
      {"rfind", [](const std::string& s, const CallArgs& a) { return find_method(s, a, true); }},
      {"index", [](const std::string& s, const CallArgs& a) { Value v = find_method(s, a, false); if (v.integer < 0) fail("substring not found"); return v; }},
      {"rindex", [](const std::string& s, const CallArgs& a) { Value v = find_method(s, a, true); if (v.integer < 0) fail("substring not found"); return v; }},
      {"count", [](const std::string& s, const CallArgs& a) { const Value* sub = a.get(0, "x"); if (!sub || !sub->is_string()) fail("must be str"); if (sub->text.empty()) return Value::from(static_cast<std::int64_t>(py_len(s) + 1)); std::int64_t n = 0; for (std::size_t p = s.find(sub->text); p != std::string::npos; p = s.find(sub->text, p + sub->text.size())) ++n; return Value::from(n); }},
      {"join", [](const std::string& s, const CallArgs& a) { const Value* items = a.get(0, "iterable"); if (!items) fail("join() takes exactly one argument (0 given)"); std::string out; bool first = true; for (const auto& v : iterate(*items)) { if (!v.is_string()) fail("sequence item: expected str instance, " + type_name(v) + " found"); out += (first ? "" : s) + v.text; first = false; } return Value::from(out); }},
      {"format", [](const std::string& s, const CallArgs& a) { return Value::from(py_str_format(s, a)); }},
      {"isdigit", [](const std::string& s, const CallArgs&) { return Value::from(all_chars(s, [](unsigned char c) { return std::isdigit(c) != 0; })); }},
      {"isnumeric", [](const std::string& s, const CallArgs&) { return Value::from(all_chars(s, [](unsigned char c) { return std::isdigit(c) != 0; })); }},
      {"isdecimal", [](const std::string& s, const CallArgs&) { return Value::from(all_chars(s, [](unsigned char c) { return std::isdigit(c) != 0; })); }},
      {"isalpha", [](const std::string& s, const CallArgs&) { return Value::from(all_chars(s, [](unsigned char c) { return std::isalpha(c) != 0 || c >= 0x80; })); }},
      {"isalnum", [](const std::string& s, const CallArgs&) { return Value::from(all_chars(s, [](unsigned char c) { return std::isalnum(c) != 0 || c >= 0x80; })); }},
      {"isspace", [](const std::string& s, const CallArgs&) { auto cps = code_points(s); return Value::from(!cps.empty() && std::all_of(cps.begin(), cps.end(), is_py_space)); }},
      {"isupper", [](const std::string& s, const CallArgs&) { bool any = false; for (unsigned char c : s) { if (std::islower(c)) return Value::from(false); any |= std::isupper(c) != 0; } return Value::from(any); }},
      {"islower", [](const std::string& s, const CallArgs&) { bool any = false; for (unsigned char c : s) { if (std::isupper(c)) return Value::from(false); any |= std::islower(c) != 0; } return Value::from(any); }},
      {"center", [](const std::string& s, const CallArgs& a) { const Value* f = a.get(1, "fillchar"); return Value::from(pad(s, int_arg(a, 0, "width", 0), f ? f->text : " ", 0)); }},
      {"ljust", [](const std::string& s, const CallArgs& a) { const Value* f = a.get(1, "fillchar"); return Value::from(pad(s, int_arg(a, 0, "width", 0), f ? f->text : " ", -1)); }},
      {"rjust", [](const std::string& s, const CallArgs& a) { const Value* f = a.get(1, "fillchar"); return Value::from(pad(s, int_arg(a, 0, "width", 0), f ? f->text : " ", 1)); }},
      {"zfill", [](const std::string& s, const CallArgs& a) { std::int64_t w = int_arg(a, 0, "width", 0); std::string sign, body = s; if (!s.empty() && (s[0] == '-' || s[0] == '+')) sign = s.substr(0, 1), body = s.substr(1); return Value::from(sign + pad(body, w - static_cast<std::int64_t>(sign.size()), "0", 1)); }},
      {"partition", [](const std::string& s, const CallArgs& a) { const Value* sep = a.get(0, "sep"); if (!sep || !sep->is_string()) fail("must be str"); return partition(s, sep->text, false); }},
      {"rpartition", [](const std::string& s, const CallArgs& a) { const Value* sep = a.get(0, "sep"); if (!sep || !sep->is_string()) fail("must be str"); return partition(s, sep->text, true); }},
      {"removeprefix", [](const std::string& s, const CallArgs& a) { const Value* p = a.get(0, "prefix"); if (!p || !p->is_string()) fail("must be str"); return Value::from(s.compare(0, p->text.size(), p->text) == 0 ? s.substr(p->text.size()) : s); }},
      {"removesuffix", [](const std::string& s, const CallArgs& a) { const Value* p = a.get(0, "suffix"); if (!p || !p->is_string()) fail("must be str"); bool hit = !p->text.empty() && p->text.size() <= s.size() && s.compare(s.size() - p->text.size(), p->text.size(), p->text) == 0; return Value::from(hit ? s.substr(0, s.size() - p->text.size()) : s); }},
  };
  return methods;
}

Value dict_method(const Value& self, const std::string& name) {
  auto d = self.dict;
  if (name == "items" || name == "keys" || name == "values") {
    return make_function(name, [d, name](Renderer&, const CallArgs&) {
      List out;
      for (const auto& kv : d->items) {
        if (name == "items") out.push_back(Value::from(List{kv.first, kv.second}, true));
        else out.push_back(name == "keys" ? kv.first : kv.second);
      }
      return Value::from(std::move(out));
    });
  }
  if (name == "get") {
    return make_function(name, [d](Renderer&, const CallArgs& a) {
      const Value* key = a.get(0, "key");
      if (!key) fail("get expected at least 1 argument, got 0");
      if (const Value* v = d->find(*key)) return *v;
      const Value* fallback = a.get(1, "default");
      return fallback ? *fallback : Value::none();
    });
  }
  if (name == "copy") {
    return make_function(name, [d](Renderer&, const CallArgs&) { return Value::from(std::make_shared<Dict>(*d)); });
  }
  return Value::undefined();
}

Value list_method(const Value& self, const std::string& name) {
  auto items = self.list;
  if (name == "count") {
    return make_function(name, [items](Renderer&, const CallArgs& a) {
      const Value* x = a.get(0, "x");
      std::int64_t n = 0;
      for (const auto& v : *items) n += x && equal(v, *x);
      return Value::from(n);
    });
  }
  if (name == "index") {
    return make_function(name, [items](Renderer&, const CallArgs& a) {
      const Value* x = a.get(0, "x");
      for (std::size_t i = 0; x && i < items->size(); ++i)
        if (equal((*items)[i], *x)) return Value::from(static_cast<std::int64_t>(i));
      fail("value is not in list");
    });
  }
  if (name == "copy" && !self.is_tuple) {
    return make_function(name, [items](Renderer&, const CallArgs&) { return Value::from(List(*items)); });
  }
  return Value::undefined();
}

}  // namespace

Value bound_method(const Value& self, const std::string& name) {
  if (self.is_string()) {
    auto it = string_methods().find(name);
    if (it == string_methods().end()) return Value::undefined();
    StrMethod method = it->second;
    std::string text = self.text;
    return make_function(name, [method, text](Renderer&, const CallArgs& a) { return method(text, a); });
  }
  if (self.is_dict() && !self.dict->is_namespace) return dict_method(self, name);
  if (self.is_list()) return list_method(self, name);
  return Value::undefined();
}

}  // namespace rayless::jinja::detail
