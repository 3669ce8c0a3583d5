// jinja2's tests (`x is defined`, `x is divisibleby 3`, ...), with Python's type rules: a bool is a
// number but not an integer, a dict is a sequence, a string is iterable.
#include "chat/jinja_internal.h"

#include <cctype>
#include <map>

namespace rayless::jinja::detail {
namespace {

const Value& operand(const CallArgs& a, const char* test) {
  if (a.positional.empty()) fail(std::string("test '") + test + "' needs an argument");
  return a.positional[0];
}

bool compare_test(const Value& v, const CallArgs& a, const char* op) {
  int c = compare(v, operand(a, op), op);
  std::string o = op;
  return o == "<" ? c < 0 : o == "<=" ? c <= 0 : o == ">" ? c > 0 : c >= 0;
}

bool same_as(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::List: return a.list == b.list;
    case Kind::Dict: return a.dict == b.dict;
    case Kind::Callable: return a.callable == b.callable;
    default: return equal(a, b);
  }
}

bool integral_operand(const Value& v, const char* test) {
  if (!v.is_number()) fail(std::string("test '") + test + "' needs a number, got " + type_name(v));
  return v.is_integral();
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"defined", [](Renderer&, const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](Renderer&, const Value& v, const CallArgs&) { return v.is_undefined(); }},
      {"none", [](Renderer&, const Value& v, const CallArgs&) { return v.is_none(); }},
      {"boolean", [](Renderer&, const Value& v, const CallArgs&) { return v.kind == Kind::Bool; }},
      {"true", [](Renderer&, const Value& v, const CallArgs&) { return v.kind == Kind::Bool && v.boolean; }},
      {"false", [](Renderer&, const Value& v, const CallArgs&) { return v.kind == Kind::Bool && !v.boolean; }},
      {"integer", [](Renderer&, const Value& v, const CallArgs&) { return v.kind == Kind::Int; }},
      {"float", [](Renderer&, const Value& v, const CallArgs&) { return v.kind == Kind::Float; }},
      {"number", [](Renderer&, const Value& v, const CallArgs&) { return v.is_number(); }},
      {"string", [](Renderer&, const Value& v, const CallArgs&) { return v.is_string(); }},
      {"mapping", [](Renderer&, const Value& v, const CallArgs&) { return v.is_dict() && !v.dict->is_namespace; }},
      {"iterable", [](Renderer&, const Value& v, const CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.dict->is_namespace); }},
      {"sequence", [](Renderer&, const Value& v, const CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.dict->is_namespace); }},
      {"callable", [](Renderer&, const Value& v, const CallArgs&) { return v.kind == Kind::Callable; }},
      {"odd", [](Renderer&, const Value& v, const CallArgs&) { return integral_operand(v, "odd") && (v.as_int() % 2 != 0); }},
      {"even", [](Renderer&, const Value& v, const CallArgs&) { return integral_operand(v, "even") && (v.as_int() % 2 == 0); }},
      {"divisibleby", [](Renderer&, const Value& v, const CallArgs& a) { const Value& n = operand(a, "divisibleby"); Value r = binary_op("%", v, n); return !truthy(r); }},
      {"eq", [](Renderer&, const Value& v, const CallArgs& a) { return equal(v, operand(a, "eq")); }},
      {"equalto", [](Renderer&, const Value& v, const CallArgs& a) { return equal(v, operand(a, "equalto")); }},
      {"==", [](Renderer&, const Value& v, const CallArgs& a) { return equal(v, operand(a, "==")); }},
      {"ne", [](Renderer&, const Value& v, const CallArgs& a) { return !equal(v, operand(a, "ne")); }},
      {"!=", [](Renderer&, const Value& v, const CallArgs& a) { return !equal(v, operand(a, "!=")); }},
      {"lt", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, "<"); }},
      {"lessthan", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, "<"); }},
      {"<", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, "<"); }},
      {"le", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, "<="); }},
      {"<=", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, "<="); }},
      {"gt", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, ">"); }},
      {"greaterthan", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, ">"); }},
      {">", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, ">"); }},
      {"ge", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, ">="); }},
      {">=", [](Renderer&, const Value& v, const CallArgs& a) { return compare_test(v, a, ">="); }},
      {"in", [](Renderer&, const Value& v, const CallArgs& a) { return contains(operand(a, "in"), v); }},
      {"sameas", [](Renderer&, const Value& v, const CallArgs& a) { return same_as(v, operand(a, "sameas")); }},
      {"escaped", [](Renderer&, const Value& v, const CallArgs&) { return v.is_string() && v.is_markup; }},
      {"lower", [](Renderer&, const Value& v, const CallArgs&) { std::string s = to_str(v); bool any = false; for (unsigned char c : s) { if (std::isupper(c)) return false; any |= std::islower(c) != 0; } return any; }},
      {"upper", [](Renderer&, const Value& v, const CallArgs&) { std::string s = to_str(v); bool any = false; for (unsigned char c : s) { if (std::islower(c)) return false; any |= std::isupper(c) != 0; } return any; }},
      {"filter", [](Renderer&, const Value& v, const CallArgs&) { return v.is_string() && find_filter(v.text) != nullptr; }},
      {"test", [](Renderer&, const Value& v, const CallArgs&) { return v.is_string() && find_test(v.text) != nullptr; }},
  };
  return table;
}

}  // namespace

TestFn find_test(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

}  // namespace rayless::jinja::detail
