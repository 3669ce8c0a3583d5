// Private parts of the Jinja engine: values with Python semantics, tokens, the syntax tree, and the
// hooks the renderer gives filters and methods. Only src/chat/*.cpp include this.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace rayless::jinja::detail {

// ---- errors ------------------------------------------------------------------------------------
// A template error before it knows its line; the renderer stamps the line of the innermost node.
struct TemplateError : std::runtime_error {
  explicit TemplateError(const std::string& message, int line_number = 0)
      : std::runtime_error(message), line(line_number) {}
  int line;
};
[[noreturn]] void fail(const std::string& message);

// ---- values ------------------------------------------------------------------------------------
enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

struct Value;
struct Dict;
struct Callable;
using List = std::vector<Value>;

struct Value {
  Kind kind = Kind::Undefined;
  bool boolean = false;
  std::int64_t integer = 0;
  double number = 0;
  std::string text;  // String; for Undefined, the message an error about it reports
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Callable> callable;
  bool is_tuple = false;     // a List that Python would hold as a tuple (prints with parentheses)
  bool is_markup = false;    // a String that escape or a macro returned
  bool unsafe = false;       // an Undefined that stands for a sandbox-forbidden attribute

  static Value undefined(std::string message = "");
  static Value none();
  static Value from(bool b);
  static Value from(std::int64_t i);
  static Value from(int i) { return from(static_cast<std::int64_t>(i)); }
  static Value from(double f);
  static Value from(std::string s);
  static Value from(const char* s) { return from(std::string(s)); }
  static Value from(List items, bool tuple = false);
  static Value from(std::shared_ptr<Dict> d);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_integral() const { return kind == Kind::Int || kind == Kind::Bool; }
  double as_double() const;
  std::int64_t as_int() const;  // Int or Bool
};

struct Dict {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;  // namespace(...) objects: the one thing a template may mutate
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The named argument at `position` or `name`; Undefined when absent. Marks it as used.
  const Value* get(std::size_t position, const std::string& name) const;
};

class Renderer;
struct Callable {
  std::string name;
  std::function<Value(Renderer&, const CallArgs&)> call;
};

// Python semantics (jinja_value.cpp)
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, const char* op);  // <0, 0, >0; TypeError as Python
std::string type_name(const Value& v);        // Python's type name: 'str', 'int', 'dict', ...
std::string object_repr(const Value& v);      // jinja's "'dict object'" / "None" in undefined messages
std::string to_str(const Value& v);           // str(v)
std::string repr(const Value& v);             // repr(v)
std::string float_repr(double d);
std::string string_repr(const std::string& s);
void check_defined(const Value& v);            // UndefinedError when v is Undefined
Value from_json(const nlohmann::ordered_json& j);
struct JsonStyle {
  std::string indent;  // empty with has_indent=false: one line
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
};
std::string to_json(const Value& v, const JsonStyle& style);
Value make_function(std::string name, std::function<Value(Renderer&, const CallArgs&)> fn);

// UTF-8 text as Python sees it: one element per code point
std::vector<std::string> code_points(const std::string& s);
std::size_t py_len(const std::string& s);
bool is_ascii(const std::string& s);

// Arithmetic and containment (jinja_operators.cpp)
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
Value get_item(const Value& obj, const Value& key);          // obj[key], attribute fallback
Value get_attr(const Value& obj, const std::string& name);   // obj.name, item fallback
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
std::vector<Value> iterate(const Value& v);                  // what `for x in v` visits
std::string python_format(const std::string& format, const Value& args);
std::string html_escape(const std::string& s);                     // markupsafe.escape  // "%s" % args

// Methods of str, dict and list (jinja_methods.cpp): Undefined when `name` is not one
Value bound_method(const Value& self, const std::string& name);
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const Value& sep, std::int64_t maxsplit);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& with,
                       std::int64_t count);

// ---- tokens ------------------------------------------------------------------------------------
enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok type = Tok::End;
  std::string text;  // Data text, name, operator, or the decoded string literal
  std::int64_t integer = 0;
  double number = 0;
  int line = 1;
};

std::vector<Token> tokenize(const std::string& source);  // jinja_lexer.cpp

// ---- syntax tree -------------------------------------------------------------------------------
enum class ExprKind {
  Literal, Name, Attr, Item, Slice, Call, Filter, Test, Unary, Binary, And, Or, Not, Compare,
  CondExpr, ListLit, TupleLit, DictLit
};

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::Literal;
  int line = 1;
  Value literal;
  std::string name;                 // Name, Attr, Filter / Test name, Unary / Binary operator
  std::vector<ExprPtr> args;        // operands, positional call args, list items, dict keys+values
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;     // Compare: the operator before each args[i + 1]
  ExprPtr target;                   // Attr/Item/Slice/Call/Filter/Test: what it applies to
  ExprPtr dyn_args, dyn_kwargs;     // Call: *args, **kwargs
};

enum class StmtKind {
  Data, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, Generation
};

struct Stmt;
using StmtPtr = std::shared_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  StmtKind kind = StmtKind::Data;
  int line = 1;
  std::string text;                          // Data; Macro name
  ExprPtr expr;                              // Output; For iterable; Set value; CallBlock call
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: condition (null for else) and body
  std::vector<std::string> targets;          // For / Set names (several: tuple unpacking)
  ExprPtr attr_target;                       // Set ns.attr: the Attr expression
  ExprPtr condition;                         // For ... if condition
  ExprPtr filter;                            // SetBlock / FilterBlock: Filter chain on a Literal
  std::vector<MacroParam> params;            // Macro / CallBlock caller parameters
  Body body, else_body;
};

Body parse(const std::vector<Token>& tokens);  // jinja_parser.cpp

// ---- rendering ---------------------------------------------------------------------------------
// Filters and tests (jinja_filters.cpp, jinja_tests.cpp): null when no such name.
using FilterFn = Value (*)(Renderer&, const Value&, const CallArgs&);
using TestFn = bool (*)(Renderer&, const Value&, const CallArgs&);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);

class Renderer {
 public:
  Renderer(const nlohmann::ordered_json& context, std::time_t now);
  std::string render(const Body& body);
  Value call(const Value& fn, const CallArgs& args);
  Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
  bool apply_test(const std::string& name, const Value& v, const CallArgs& args);
  std::time_t now() const { return now_; }

 private:
  enum class Flow { Normal, Break, Continue };
  using Frame = std::vector<std::pair<std::string, Value>>;

  Flow exec(const Body& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  Flow exec_if(const Stmt& s, std::string& out);
  Flow exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s, std::string& out);
  void exec_macro(const Stmt& s);
  void exec_call_block(const Stmt& s, std::string& out);
  std::string render_captured(const Body& body);
  Value make_macro(const Stmt& s, bool is_caller);

  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_compare(const Expr& e);
  CallArgs eval_args(const Expr& e);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  void unpack_into(const std::vector<std::string>& names, const Value& v);
  void install_globals(const nlohmann::ordered_json& context);

  std::vector<Frame> frames_;  // [0] globals and context, [1] template top level, then scopes
  std::time_t now_;
  int depth_ = 0;
};

}  // namespace rayless::jinja::detail
