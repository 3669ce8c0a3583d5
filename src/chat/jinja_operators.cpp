// Operators on values as Python evaluates them (+ - * / // % **, `in`, indexing, slicing, iteration),
// and jinja2's sandboxed attribute lookup: `a.b` tries the attribute then the item, `a['b']` the reverse.
#include "chat/jinja_internal.h"

#include <cmath>
#include <cstdio>

namespace rayless::jinja::detail {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Value repeat(const Value& seq, std::int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (std::int64_t i = 0; i < times; ++i) out += seq.text;
    return Value::from(out);
  }
  List out;
  for (std::int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::from(std::move(out), seq.is_tuple);
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

double float_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  bool as_float = a.kind == Kind::Float || b.kind == Kind::Float;
  if (op == "+") return as_float ? Value::from(a.as_double() + b.as_double()) : Value::from(a.as_int() + b.as_int());
  if (op == "-") return as_float ? Value::from(a.as_double() - b.as_double()) : Value::from(a.as_int() - b.as_int());
  if (op == "*") return as_float ? Value::from(a.as_double() * b.as_double()) : Value::from(a.as_int() * b.as_int());
  bool zero = as_float ? b.as_double() == 0 : b.as_int() == 0;
  if (op == "/") {
    if (zero) fail("division by zero");
    return Value::from(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (zero) fail(as_float ? "float floor division by zero" : "integer division or modulo by zero");
    return as_float ? Value::from(std::floor(a.as_double() / b.as_double())) : Value::from(floor_div(a.as_int(), b.as_int()));
  }
  if (op == "%") {
    if (zero) fail(as_float ? "float modulo" : "integer modulo by zero");
    if (as_float) return Value::from(float_mod(a.as_double(), b.as_double()));
    return Value::from(a.as_int() - b.as_int() * floor_div(a.as_int(), b.as_int()));
  }
  // **
  if (!as_float && b.as_int() >= 0) {
    std::int64_t result = 1, base = a.as_int();
    for (std::int64_t e = b.as_int(); e > 0; --e) result *= base;
    return Value::from(result);
  }
  return Value::from(std::pow(a.as_double(), b.as_double()));
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::from(to_str(a) + to_str(b));
  check_defined(a);
  check_defined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string() && a.is_markup != b.is_markup) {  // Markup escapes the plain str
      Value joined = Value::from((a.is_markup ? a.text : html_escape(a.text)) + (b.is_markup ? b.text : html_escape(b.text)));
      joined.is_markup = true;
      return joined;
    }
    if (a.is_string() && b.is_string()) return Value::from(a.text + b.text);
    if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::from(std::move(out), a.is_tuple);
    }
    if (a.is_string()) fail("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.is_list() && !a.is_tuple) fail("can only concatenate list (not \"" + type_name(b) + "\") to list");
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) return Value::from(python_format(a.text, b));
  unsupported(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined: return false;
    case Kind::String:
      if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + type_name(item));
      return container.text.find(item.text) != std::string::npos;
    case Kind::List:
      for (const auto& v : *container.list)
        if (equal(v, item)) return true;
      return false;
    case Kind::Dict: return container.dict->find(item) != nullptr;
    default: fail("argument of type '" + type_name(container) + "' is not iterable");
  }
}

namespace {

bool index_in(std::int64_t& index, std::size_t size) {
  if (index < 0) index += static_cast<std::int64_t>(size);
  return index >= 0 && index < static_cast<std::int64_t>(size);
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(object_repr(obj) + " has no attribute " + string_repr(name));
}

// The methods ImmutableSandboxedEnvironment forbids: they would change a list or dict in place.
bool is_mutating_method(const Value& obj, const std::string& name) {
  static const char* list_methods[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  static const char* dict_methods[] = {"pop", "popitem", "update", "setdefault", "clear"};
  if (obj.is_list() && !obj.is_tuple) {
    for (const char* m : list_methods)
      if (name == m) return true;
  }
  if (obj.is_dict() && !obj.dict->is_namespace) {
    for (const char* m : dict_methods)
      if (name == m) return true;
  }
  return false;
}

Value unsafe_attribute(const Value& obj, const std::string& name) {
  Value v = Value::undefined("access to attribute " + string_repr(name) + " of " + string_repr(type_name(obj)) +
                             " object is unsafe.");
  v.unsafe = true;
  return v;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  check_defined(obj);
  if (is_mutating_method(obj, name)) return unsafe_attribute(obj, name);
  if (obj.is_dict() && obj.dict->is_namespace) {
    if (const Value* v = obj.dict->find(name)) return *v;
    return missing_attribute(obj, name);
  }
  Value method = bound_method(obj, name);
  if (!method.is_undefined()) return method;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict->find(name)) return *v;
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  check_defined(obj);
  if (obj.is_dict() && !obj.dict->is_namespace) {
    if (const Value* v = obj.dict->find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    std::int64_t index = key.as_int();
    if (obj.is_list() && index_in(index, obj.list->size())) return (*obj.list)[index];
    if (obj.is_string()) {
      if (is_ascii(obj.text)) {
        if (index_in(index, obj.text.size())) return Value::from(obj.text.substr(index, 1));
      } else {
        auto chars = code_points(obj.text);
        if (index_in(index, chars.size())) return Value::from(chars[index]);
      }
    }
  }
  if (key.is_string()) {
    if (is_mutating_method(obj, key.text)) return unsafe_attribute(obj, key.text);
    if (obj.is_dict() && obj.dict->is_namespace) return missing_attribute(obj, key.text);
    Value method = bound_method(obj, key.text);
    if (!method.is_undefined()) return method;
    return missing_attribute(obj, key.text);
  }
  return Value::undefined(object_repr(obj) + " has no element " + repr(key));
}

namespace {

// Python's slice.indices(): clamps start and stop for the step's direction.
void slice_bounds(std::int64_t size, const Value& start, const Value& stop, std::int64_t step, std::int64_t& from,
                  std::int64_t& to) {
  auto clamp = [&](const Value& v, std::int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    if (!v.is_integral()) fail("slice indices must be integers or None or have an __index__ method");
    std::int64_t i = v.as_int();
    if (i < 0) i += size;
    if (step > 0) return std::max<std::int64_t>(0, std::min(i, size));
    return std::max<std::int64_t>(-1, std::min(i, size - 1));
  };
  from = clamp(start, step > 0 ? 0 : size - 1);
  to = clamp(stop, step > 0 ? size : -1);
}

}  // namespace

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step_value) {
  check_defined(obj);
  std::int64_t step = 1;
  if (!step_value.is_undefined() && !step_value.is_none()) {
    if (!step_value.is_integral()) fail("slice indices must be integers or None or have an __index__ method");
    step = step_value.as_int();
    if (step == 0) fail("slice step cannot be zero");
  }
  std::vector<std::string> chars;
  std::int64_t size;
  if (obj.is_string()) {
    chars = code_points(obj.text);
    size = static_cast<std::int64_t>(chars.size());
  } else if (obj.is_list()) {
    size = static_cast<std::int64_t>(obj.list->size());
  } else {
    fail("'" + type_name(obj) + "' object is not subscriptable");
  }
  std::int64_t from, to;
  slice_bounds(size, start, stop, step, from, to);
  std::string text;
  List items;
  for (std::int64_t i = from; step > 0 ? i < to : i > to; i += step) {
    if (obj.is_string()) text += chars[i];
    else items.push_back((*obj.list)[i]);
  }
  return obj.is_string() ? Value::from(text) : Value::from(std::move(items), obj.is_tuple);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: return *v.list;
    case Kind::Dict: {
      if (v.dict->is_namespace) fail("'Namespace' object is not iterable");
      std::vector<Value> keys;
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> out;
      for (auto& c : code_points(v.text)) out.push_back(Value::from(c));
      return out;
    }
    default: fail("'" + type_name(v) + "' object is not iterable");
  }
}

// printf-style "%s" % args, for the conversions templates use: s r d i f e g x o c and %%.
std::string python_format(const std::string& format, const Value& args) {
  std::vector<Value> values = args.is_list() && args.is_tuple ? *args.list : std::vector<Value>{args};
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    std::size_t j = i + 1;
    const Value* value = nullptr;
    if (j < format.size() && format[j] == '(' && args.is_dict()) {
      std::size_t close = format.find(')', j);
      if (close == std::string::npos) fail("incomplete format key");
      value = args.dict->find(format.substr(j + 1, close - j - 1));
      if (!value) fail(string_repr(format.substr(j + 1, close - j - 1)));
      j = close + 1;
    }
    std::size_t spec_start = j;
    while (j < format.size() && std::string("-+ #0123456789.").find(format[j]) != std::string::npos) ++j;
    if (j >= format.size()) fail("incomplete format");
    char conv = format[j];
    std::string spec = format.substr(spec_start, j - spec_start);
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!value) {
      if (next >= values.size()) fail("not enough arguments for format string");
      value = &values[next++];
    }
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? to_str(*value) : repr(*value);
      std::snprintf(buf, sizeof buf, ("%" + spec + "s").c_str(), s.c_str());
    } else if (std::string("dixXoc").find(conv) != std::string::npos) {
      if (!value->is_number()) fail("%" + std::string(1, conv) + " format: a real number is required, not " + type_name(*value));
      std::int64_t n = value->kind == Kind::Float ? static_cast<std::int64_t>(value->number) : value->as_int();
      std::string c = conv == 'i' ? "d" : std::string(1, conv);
      std::snprintf(buf, sizeof buf, ("%" + spec + "ll" + c).c_str(), static_cast<long long>(n));
    } else if (std::string("feEgG").find(conv) != std::string::npos) {
      if (!value->is_number()) fail("must be real number, not " + type_name(*value));
      std::snprintf(buf, sizeof buf, ("%" + spec + conv).c_str(), value->as_double());
    } else {
      fail(std::string("unsupported format character '") + conv + "'");
    }
    out += buf;
  }
  if (next < values.size() && !args.is_dict()) fail("not all arguments converted during string formatting");
  return out;
}

}  // namespace rayless::jinja::detail
