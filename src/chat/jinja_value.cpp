// Values with Python's semantics: truthiness, equality, ordering, str() and repr() (floats as Python
// prints them, strings quoted as Python quotes them), and conversion from and to JSON (json.dumps).
#include "chat/jinja_internal.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace rayless::jinja::detail {

void fail(const std::string& message) { throw TemplateError(message); }

Value Value::undefined(std::string message) {
  Value v;
  v.text = std::move(message);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::from(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.boolean = b;
  return v;
}
Value Value::from(std::int64_t i) {
  Value v;
  v.kind = Kind::Int;
  v.integer = i;
  return v;
}
Value Value::from(double f) {
  Value v;
  v.kind = Kind::Float;
  v.number = f;
  return v;
}
Value Value::from(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.text = std::move(s);
  return v;
}
Value Value::from(List items, bool tuple) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<List>(std::move(items));
  v.is_tuple = tuple;
  return v;
}
Value Value::from(std::shared_ptr<Dict> d) {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::move(d);
  return v;
}

double Value::as_double() const {
  if (kind == Kind::Float) return number;
  return static_cast<double>(as_int());
}
std::int64_t Value::as_int() const { return kind == Kind::Bool ? (boolean ? 1 : 0) : integer; }

const Value* Dict::find(const Value& key) const {
  for (const auto& kv : items)
    if (equal(kv.first, key)) return &kv.second;
  return nullptr;
}
const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first.kind == Kind::String && kv.first.text == key) return &kv.second;
  return nullptr;
}
void Dict::set(const Value& key, Value value) {
  for (auto& kv : items) {
    if (equal(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* CallArgs::get(std::size_t position, const std::string& name) const {
  if (position < positional.size()) return &positional[position];
  for (const auto& kv : keyword)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

Value make_function(std::string name, std::function<Value(Renderer&, const CallArgs&)> fn) {
  Value v;
  v.kind = Kind::Callable;
  v.callable = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.boolean;
    case Kind::Int: return v.integer != 0;
    case Kind::Float: return v.number != 0;
    case Kind::String: return !v.text.empty();
    case Kind::List: return !v.list->empty();
    case Kind::Dict: return v.dict->is_namespace || !v.dict->items.empty();
    case Kind::Callable: return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.text == b.text;
    case Kind::List: {
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (std::size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.dict->is_namespace || b.dict->is_namespace) return a.dict == b.dict;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* other = b.dict->find(kv.first);
        if (!other || !equal(kv.second, *other)) return false;
      }
      return true;
    }
    case Kind::Callable: return a.callable == b.callable;
    default: return false;
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  check_defined(a);
  check_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.text < b.text ? -1 : a.text > b.text ? 1 : 0;  // UTF-8 keeps code point order
  if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
    std::size_t n = std::min(a.list->size(), b.list->size());
    for (std::size_t i = 0; i < n; ++i)
      if (!equal((*a.list)[i], (*b.list)[i])) return compare((*a.list)[i], (*b.list)[i], op);
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  fail(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return v.is_markup ? "Markup" : "str";
    case Kind::List: return v.is_tuple ? "tuple" : "list";
    case Kind::Dict: return v.dict->is_namespace ? "Namespace" : "dict";
    case Kind::Callable: return "function";
  }
  return "object";
}

std::string object_repr(const Value& v) {
  if (v.is_none()) return "'None'";
  return "'" + type_name(v) + " object'";
}

void check_defined(const Value& v) {
  if (v.is_undefined()) fail(v.text.empty() ? "'Undefined' is undefined" : v.text);
}

// Python's repr(float): the shortest digits that read back the same, scientific below 1e-4 and from 1e16.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s(buf);
  std::size_t e = s.find('e');
  int exponent = std::atoi(s.c_str() + e + 1);
  std::string mantissa = s.substr(0, e);
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  } else if (exponent < 0) {
    out = "0." + std::string(-exponent - 1, '0') + digits;
  } else {
    std::size_t int_len = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= int_len) out = digits + std::string(int_len - digits.size(), '0') + ".0";
    else out = digits.substr(0, int_len) + "." + digits.substr(int_len);
  }
  return negative ? "-" + out : out;
}

// Python's repr(str): single quotes unless the text holds ' and no ", escapes for control characters.
std::string string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::String: return v.is_markup ? "Markup(" + string_repr(v.text) + ")" : string_repr(v.text);
    case Kind::Undefined: return "Undefined";
    case Kind::List: {
      std::string out = v.is_tuple ? "(" : "[";
      for (std::size_t i = 0; i < v.list->size(); ++i) out += (i ? ", " : "") + repr((*v.list)[i]);
      if (v.is_tuple && v.list->size() == 1) out += ",";
      return out + (v.is_tuple ? ")" : "]");
    }
    case Kind::Dict: {
      std::string out = v.dict->is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& kv : v.dict->items) {
        out += (first ? "" : ", ") + repr(kv.first) + ": " + repr(kv.second);
        first = false;
      }
      return out + (v.dict->is_namespace ? "}>" : "}");
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.boolean ? "True" : "False";
    case Kind::Int: return std::to_string(v.integer);
    case Kind::Float: return float_repr(v.number);
    case Kind::String: return v.text;
    case Kind::Callable: return "<function " + v.callable->name + ">";
    default: return repr(v);
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::from(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::from(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value::from(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value::from(j.get<double>());
    case nlohmann::json::value_t::string: return Value::from(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::from(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& kv : j.items()) d->items.emplace_back(Value::from(kv.key()), from_json(kv.value()));
      return Value::from(d);
    }
    default: fail("unsupported JSON value in the context");
  }
}

namespace {

void append_u_escape(std::string& out, unsigned long unit) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\u%04lx", unit);
  out += buf;
}

// A non-ASCII code point as json.dumps(ensure_ascii=True) writes it.
void append_ascii_escape(std::string& out, const std::string& utf8) {
  auto b = [&](std::size_t i) { return static_cast<unsigned long>(static_cast<unsigned char>(utf8[i])); };
  unsigned long cp = utf8.size() == 2 ? ((b(0) & 0x1F) << 6) | (b(1) & 0x3F)
                   : utf8.size() == 3 ? ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F)
                   : utf8.size() == 4 ? ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F)
                                      : b(0);
  if (cp >= 0x10000) {
    cp -= 0x10000;
    append_u_escape(out, 0xD800 + (cp >> 10));
    append_u_escape(out, 0xDC00 + (cp & 0x3FF));
  } else {
    append_u_escape(out, cp);
  }
}

// json.dumps: escapes quotes, backslashes and control characters (and with ensure_ascii, non-ASCII).
std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  if (ensure_ascii && !is_ascii(s)) {
    for (const auto& cp : code_points(s)) {
      if (static_cast<unsigned char>(cp[0]) >= 0x80) append_ascii_escape(out, cp);
      else out += json_string(cp, false).substr(1, std::string::npos).substr(0, json_string(cp, false).size() - 2);
    }
    return out + "\"";
  }
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string json_key(const Value& key) {
  switch (key.kind) {
    case Kind::String: return key.text;
    case Kind::None: return "null";
    case Kind::Bool: return key.boolean ? "true" : "false";
    case Kind::Int:
    case Kind::Float: return to_str(key);
    default: fail("keys must be str, int, float, bool or None, not " + type_name(key));
  }
}

void write_json(const Value& v, const JsonStyle& style, int level, std::string& out) {
  auto newline = [&](int depth) {
    out += "\n";
    for (int i = 0; i < depth; ++i) out += style.indent;
  };
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.boolean ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.integer); return;
    case Kind::Float:
      out += std::isnan(v.number) ? "NaN" : std::isinf(v.number) ? (v.number > 0 ? "Infinity" : "-Infinity") : float_repr(v.number);
      return;
    case Kind::String: out += json_string(v.text, style.ensure_ascii); return;
    case Kind::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (std::size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += style.item_separator;
        if (style.has_indent) newline(level + 1);
        write_json((*v.list)[i], style, level + 1, out);
      }
      if (style.has_indent) newline(level);
      out += "]";
      return;
    }
    case Kind::Dict: {
      if (v.dict->is_namespace) fail("Object of type Namespace is not JSON serializable");
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& kv : v.dict->items) entries.emplace_back(json_key(kv.first), &kv.second);
      if (style.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += "{";
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (i) out += style.item_separator;
        if (style.has_indent) newline(level + 1);
        out += json_string(entries[i].first, style.ensure_ascii) + style.key_separator;
        write_json(*entries[i].second, style, level + 1, out);
      }
      if (style.has_indent) newline(level);
      out += "}";
      return;
    }
    default: fail("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  write_json(v, style, 0, out);
  return out;
}

bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::size_t py_len(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

}  // namespace rayless::jinja::detail
