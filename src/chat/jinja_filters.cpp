// jinja2's built-in filters, as they behave in Python (sort, unique, min, max and dictsort ignore case
// by default), plus transformers' tojson (json.dumps with ensure_ascii=False, indent, separators,
// sort_keys). Sequence filters that yield generators in jinja2 (map, select, ...) return lists here.
#include "chat/jinja_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace rayless::jinja::detail {
namespace {

const Value* arg(const CallArgs& a, std::size_t i, const char* name) { return a.get(i, name); }
bool flag(const CallArgs& a, std::size_t i, const char* name, bool fallback = false) {
  const Value* v = arg(a, i, name);
  return v ? truthy(*v) : fallback;
}
std::int64_t int_arg(const CallArgs& a, std::size_t i, const char* name, std::int64_t fallback) {
  const Value* v = arg(a, i, name);
  return v && v->is_number() ? static_cast<std::int64_t>(v->as_double()) : fallback;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::from(py_lower(v.text)) : v; }

// "a.b.0": item lookups by dotted path, as jinja2's attribute= arguments do.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = get_item(v, numeric ? Value::from(static_cast<std::int64_t>(std::stoll(part))) : Value::from(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// The sort key of attribute= / case_sensitive= filters.
std::function<Value(const Value&)> key_function(const CallArgs& a, std::size_t attribute_pos, bool case_sensitive) {
  const Value* attribute = arg(a, attribute_pos, "attribute");
  std::string path = attribute && attribute->is_string() ? attribute->text : "";
  bool has_path = attribute && !attribute->is_none();
  return [path, has_path, case_sensitive](const Value& v) {
    Value key = has_path ? attribute_path(v, path) : v;
    return case_sensitive ? key : ignore_case(key);
  };
}

Value f_sort(Renderer&, const Value& v, const CallArgs& a) {
  bool reverse = flag(a, 0, "reverse");
  auto key = key_function(a, 2, flag(a, 1, "case_sensitive"));
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& item : iterate(v)) keyed.emplace_back(key(item), item);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first, "<") < 0 : compare(x.first, y.first, "<") < 0;
  });
  List out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return Value::from(std::move(out));
}

Value f_dictsort(Renderer&, const Value& v, const CallArgs& a) {
  check_defined(v);
  if (!v.is_dict()) fail("You can only sort by either 'key' or 'value'");
  bool case_sensitive = flag(a, 0, "case_sensitive");
  const Value* by = arg(a, 1, "by");
  int index = by && by->is_string() && by->text == "value" ? 1 : 0;
  bool reverse = flag(a, 2, "reverse");
  List items;
  for (const auto& kv : v.dict->items) items.push_back(Value::from(List{kv.first, kv.second}, true));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = (*x.list)[index], ky = (*y.list)[index];
    if (!case_sensitive) kx = ignore_case(kx), ky = ignore_case(ky);
    return reverse ? compare(ky, kx, "<") < 0 : compare(kx, ky, "<") < 0;
  });
  return Value::from(std::move(items));
}

Value f_unique(Renderer&, const Value& v, const CallArgs& a) {
  auto key = key_function(a, 1, flag(a, 0, "case_sensitive"));
  List out, seen;
  for (const auto& item : iterate(v)) {
    Value k = key(item);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return Value::from(std::move(out));
}

Value min_or_max(const Value& v, const CallArgs& a, bool want_max) {
  auto key = key_function(a, 1, flag(a, 0, "case_sensitive"));
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  std::size_t best = 0;
  for (std::size_t i = 1; i < items.size(); ++i) {
    int c = compare(key(items[i]), key(items[best]), want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value f_length(Renderer&, const Value& v, const CallArgs&) {
  switch (v.kind) {
    case Kind::Undefined: return Value::from(std::int64_t{0});
    case Kind::String: return Value::from(static_cast<std::int64_t>(py_len(v.text)));
    case Kind::List: return Value::from(static_cast<std::int64_t>(v.list->size()));
    case Kind::Dict: return Value::from(static_cast<std::int64_t>(v.dict->items.size()));
    default: fail("object of type '" + type_name(v) + "' has no len()");
  }
}

Value f_default(Renderer&, const Value& v, const CallArgs& a) {
  const Value* fallback = arg(a, 0, "default_value");
  if (v.is_undefined() || (flag(a, 1, "boolean") && !truthy(v))) return fallback ? *fallback : Value::from("");
  return v;
}

Value f_join(Renderer&, const Value& v, const CallArgs& a) {
  const Value* sep = arg(a, 0, "d");
  const Value* attribute = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep ? to_str(*sep) : "";
    out += to_str(attribute ? attribute_path(item, to_str(*attribute)) : item);
    first = false;
  }
  return Value::from(out);
}

Value f_first(Renderer&, const Value& v, const CallArgs&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Renderer&, const Value& v, const CallArgs&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_map(Renderer& r, const Value& v, const CallArgs& a) {
  List out;
  const Value* attribute = a.get(static_cast<std::size_t>(-1), "attribute");
  if (attribute) {
    const Value* fallback = a.get(static_cast<std::size_t>(-1), "default");
    for (const auto& item : iterate(v)) {
      Value x = attribute_path(item, to_str(*attribute));
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::from(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) fail("map requires a filter argument");
  CallArgs rest{{a.positional.begin() + 1, a.positional.end()}, a.keyword};
  for (const auto& item : iterate(v)) out.push_back(r.apply_filter(a.positional[0].text, item, rest));
  return Value::from(std::move(out));
}

// select / reject / selectattr / rejectattr
Value select_items(Renderer& r, const Value& v, const CallArgs& a, bool keep_if, bool by_attribute) {
  std::size_t at = 0;
  std::string path;
  if (by_attribute) {
    if (a.positional.empty()) fail("Missing parameter for attribute name");
    path = to_str(a.positional[at++]);
  }
  std::string test = at < a.positional.size() ? to_str(a.positional[at++]) : "";
  CallArgs rest{{a.positional.begin() + std::min(at, a.positional.size()), a.positional.end()}, a.keyword};
  List out;
  for (const auto& item : iterate(v)) {
    Value x = by_attribute ? attribute_path(item, path) : item;
    bool pass = test.empty() ? truthy(x) : r.apply_test(test, x, rest);
    if (pass == keep_if) out.push_back(item);
  }
  return Value::from(std::move(out));
}

Value to_int(const Value& v, const CallArgs& a) {
  check_defined(v);
  Value fallback = arg(a, 0, "default") ? *arg(a, 0, "default") : Value::from(std::int64_t{0});
  if (v.is_integral()) return Value::from(v.as_int());
  if (v.kind == Kind::Float) return Value::from(static_cast<std::int64_t>(v.number));
  if (!v.is_string()) return fallback;
  std::string s = py_strip(v.text, Value::none(), true, true);
  int base = static_cast<int>(int_arg(a, 1, "base", 10));
  char* end = nullptr;
  long long n = std::strtoll(s.c_str(), &end, base);
  if (!s.empty() && end && *end == 0) return Value::from(static_cast<std::int64_t>(n));
  double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end && *end == 0 && std::isfinite(d)) return Value::from(static_cast<std::int64_t>(d));
  return fallback;
}

Value to_float(const Value& v, const CallArgs& a) {
  check_defined(v);
  Value fallback = arg(a, 0, "default") ? *arg(a, 0, "default") : Value::from(0.0);
  if (v.is_number()) return Value::from(v.as_double());
  if (!v.is_string()) return fallback;
  std::string s = py_strip(v.text, Value::none(), true, true);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == 0 ? Value::from(d) : fallback;
}

// round(): Python's round-half-even on the exact binary value, which "%.*f" also computes.
Value f_round(Renderer&, const Value& v, const CallArgs& a) {
  std::int64_t precision = int_arg(a, 0, "precision", 0);
  const Value* method = arg(a, 1, "method");
  std::string how = method ? to_str(*method) : "common";
  if (how != "common" && how != "ceil" && how != "floor") fail("method must be common, ceil or floor");
  if (!v.is_number()) fail("type " + type_name(v) + " doesn't define __round__ method");
  if (how == "common") {
    if (v.is_integral()) return Value::from(v.as_int());
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::max<std::int64_t>(precision, 0)), v.number);
    return Value::from(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  return Value::from((how == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_tojson(Renderer&, const Value& v, const CallArgs& a) {
  JsonStyle style;
  const Value* indent = arg(a, 1, "indent");
  if (indent && !indent->is_none()) {
    style.has_indent = true;
    style.indent = indent->is_string() ? indent->text : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, indent->as_int())), ' ');
    style.item_separator = ",";
  }
  const Value* separators = arg(a, 2, "separators");
  if (separators && separators->is_list() && separators->list->size() == 2) {
    style.item_separator = to_str((*separators->list)[0]);
    style.key_separator = to_str((*separators->list)[1]);
  }
  style.sort_keys = flag(a, 3, "sort_keys");
  style.ensure_ascii = flag(a, 0, "ensure_ascii");
  return Value::from(to_json(v, style));
}

Value f_indent(Renderer&, const Value& v, const CallArgs& a) {
  check_defined(v);
  const Value* width = arg(a, 0, "width");
  std::string indention = width && width->is_string() ? width->text : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, width ? width->as_int() : 4)), ' ');
  bool first = flag(a, 1, "first"), blank = flag(a, 2, "blank");
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) lines.push_back(s.substr(start, nl - start));
  std::string out = lines.empty() ? "" : lines[0];
  for (std::size_t i = 1; i < lines.size(); ++i) out += "\n" + (blank || !lines[i].empty() ? indention + lines[i] : lines[i]);
  return Value::from(first ? indention + out : out);
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

Value markup(std::string s) {
  Value v = Value::from(std::move(s));
  v.is_markup = true;
  return v;
}

Value f_escape(Renderer&, const Value& v, const CallArgs&) {
  if (v.is_string() && v.is_markup) return v;
  return markup(html_escape(to_str(v)));
}

Value f_batch(Renderer&, const Value& v, const CallArgs& a) {
  std::int64_t size = int_arg(a, 0, "linecount", 1);
  if (size <= 0) fail("batch size must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  List out, current;
  for (const auto& item : iterate(v)) {
    current.push_back(item);
    if (static_cast<std::int64_t>(current.size()) == size) out.push_back(Value::from(std::move(current))), current = {};
  }
  if (!current.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<std::int64_t>(current.size()) < size) current.push_back(*fill);
    out.push_back(Value::from(std::move(current)));
  }
  return Value::from(std::move(out));
}

Value f_wordcount(Renderer&, const Value& v, const CallArgs&) {
  std::int64_t words = 0;
  bool in_word = false;
  for (unsigned char c : to_str(v)) {
    bool word_char = std::isalnum(c) || c == '_' || c >= 0x80;
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::from(words);
}

Value f_truncate(Renderer&, const Value& v, const CallArgs& a) {
  std::string s = to_str(v);
  std::int64_t length = int_arg(a, 0, "length", 255);
  bool killwords = flag(a, 1, "killwords");
  const Value* end_arg = arg(a, 2, "end");
  std::string end = end_arg ? to_str(*end_arg) : "...";
  std::int64_t leeway = int_arg(a, 3, "leeway", 5);
  auto cps = code_points(s);
  if (static_cast<std::int64_t>(cps.size()) <= length + leeway) return Value::from(s);
  std::int64_t keep = std::max<std::int64_t>(0, length - static_cast<std::int64_t>(py_len(end)));
  std::string head;
  for (std::int64_t i = 0; i < keep && i < static_cast<std::int64_t>(cps.size()); ++i) head += cps[i];
  if (!killwords) {
    std::size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return Value::from(head + end);
}

Value f_striptags(Renderer&, const Value& v, const CallArgs&) {
  std::string s = to_str(v), text;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 4, "<!--") == 0) {
      std::size_t close = s.find("-->", i);
      if (close != std::string::npos) { i = close + 2; continue; }
    }
    if (s[i] == '<') {
      std::size_t close = s.find('>', i);
      if (close != std::string::npos) { i = close; continue; }
    }
    text += s[i];
  }
  std::string joined;
  for (const auto& word : py_split(text, Value::none(), -1)) joined += (joined.empty() ? "" : " ") + word;
  return Value::from(joined);
}

Value f_sum(Renderer&, const Value& v, const CallArgs& a) {
  const Value* attribute = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value total = start ? *start : Value::from(std::int64_t{0});
  for (const auto& item : iterate(v))
    total = binary_op("+", total, attribute && !attribute->is_none() ? attribute_path(item, to_str(*attribute)) : item);
  return total;
}

Value f_items(Renderer&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::from(List{});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  List out;
  for (const auto& kv : v.dict->items) out.push_back(Value::from(List{kv.first, kv.second}, true));
  return Value::from(std::move(out));
}

Value f_reverse(Renderer&, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    auto cps = code_points(v.text);
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::from(out);
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::from(std::move(items));
}

Value text_filter(const Value& v, std::string (*fn)(const std::string&)) { return Value::from(fn(to_str(v))); }

// jinja2's title filter: words start after whitespace, - ( { [ or <.
std::string title_filter(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    bool boundary = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    unsigned char u = static_cast<unsigned char>(c);
    out += boundary ? c : static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
    word_start = boundary;
  }
  return out;
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"abs", [](Renderer&, const Value& v, const CallArgs&) { if (!v.is_number()) fail("bad operand type for abs(): '" + type_name(v) + "'"); return v.kind == Kind::Float ? Value::from(std::fabs(v.number)) : Value::from(static_cast<std::int64_t>(std::llabs(v.as_int()))); }},
      {"attr", [](Renderer&, const Value& v, const CallArgs& a) { const Value* n = arg(a, 0, "name"); if (!n) fail("attr requires a name"); Value m = bound_method(v, to_str(*n)); if (m.is_undefined() && v.is_dict() && v.dict->is_namespace) { if (const Value* x = v.dict->find(to_str(*n))) return *x; } return m.is_undefined() ? Value::undefined(object_repr(v) + " has no attribute " + string_repr(to_str(*n))) : m; }},
      {"batch", f_batch},
      {"capitalize", [](Renderer&, const Value& v, const CallArgs&) { return text_filter(v, py_capitalize); }},
      {"center", [](Renderer& r, const Value& v, const CallArgs& a) { CallArgs args{{Value::from(int_arg(a, 0, "width", 80))}, {}}; return r.call(bound_method(Value::from(to_str(v)), "center"), args); }},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", [](Renderer&, const Value& v, const CallArgs& a) { return to_float(v, a); }},
      {"forceescape", [](Renderer&, const Value& v, const CallArgs&) { return markup(html_escape(to_str(v))); }},
      {"format", [](Renderer&, const Value& v, const CallArgs& a) { if (!a.keyword.empty()) { auto d = std::make_shared<Dict>(); for (auto& kv : a.keyword) d->set(Value::from(kv.first), kv.second); return Value::from(python_format(to_str(v), Value::from(d))); } return Value::from(python_format(to_str(v), Value::from(List(a.positional), true))); }},
      {"indent", f_indent},
      {"int", [](Renderer&, const Value& v, const CallArgs& a) { return to_int(v, a); }},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", [](Renderer&, const Value& v, const CallArgs&) { return Value::from(iterate(v)); }},
      {"lower", [](Renderer&, const Value& v, const CallArgs&) { return text_filter(v, py_lower); }},
      {"map", f_map},
      {"max", [](Renderer&, const Value& v, const CallArgs& a) { return min_or_max(v, a, true); }},
      {"min", [](Renderer&, const Value& v, const CallArgs& a) { return min_or_max(v, a, false); }},
      {"reject", [](Renderer& r, const Value& v, const CallArgs& a) { return select_items(r, v, a, false, false); }},
      {"rejectattr", [](Renderer& r, const Value& v, const CallArgs& a) { return select_items(r, v, a, false, true); }},
      {"replace", [](Renderer&, const Value& v, const CallArgs& a) { const Value* o = arg(a, 0, "old"); const Value* n = arg(a, 1, "new"); if (!o || !n) fail("replace requires old and new"); const Value* c = arg(a, 2, "count"); return Value::from(py_replace(to_str(v), to_str(*o), to_str(*n), c && !c->is_none() ? c->as_int() : -1)); }},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", [](Renderer&, const Value& v, const CallArgs&) { return markup(to_str(v)); }},
      {"select", [](Renderer& r, const Value& v, const CallArgs& a) { return select_items(r, v, a, true, false); }},
      {"selectattr", [](Renderer& r, const Value& v, const CallArgs& a) { return select_items(r, v, a, true, true); }},
      {"sort", f_sort},
      {"string", [](Renderer&, const Value& v, const CallArgs&) { return v.is_string() ? v : Value::from(to_str(v)); }},
      {"striptags", f_striptags},
      {"sum", f_sum},
      {"title", [](Renderer&, const Value& v, const CallArgs&) { return text_filter(v, title_filter); }},
      {"tojson", f_tojson},
      {"trim", [](Renderer&, const Value& v, const CallArgs& a) { const Value* c = arg(a, 0, "chars"); return Value::from(py_strip(to_str(v), c ? *c : Value::none(), true, true)); }},
      {"truncate", f_truncate},
      {"unique", f_unique},
      {"upper", [](Renderer&, const Value& v, const CallArgs&) { return text_filter(v, py_upper); }},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

}  // namespace rayless::jinja::detail
