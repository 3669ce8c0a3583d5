// Renderer: walks the syntax tree with a stack of scopes (globals and context, the template's top
// level, then one per loop iteration or macro call, as jinja2 scopes `set`), evaluating expressions
// with Python semantics. Errors carry the line of the innermost node that raised them.
#include "chat/jinja_internal.h"

namespace rayless::jinja::detail {
namespace {

constexpr int kMaxDepth = 200;

// Applies a parsed `| f(args) | g` chain (whose innermost operand is a placeholder) to `input`.
Value apply_filter_chain(Renderer& r, const Expr& chain, const Value& input,
                         const std::function<CallArgs(const Expr&)>& eval_args) {
  if (chain.kind != ExprKind::Filter) return input;
  Value v = apply_filter_chain(r, *chain.target, input, eval_args);
  return r.apply_filter(chain.name, v, eval_args(chain));
}

}  // namespace

Renderer::Renderer(const nlohmann::ordered_json& context, std::time_t now) : frames_(2), now_(now) {
  install_globals(context);
}

std::string Renderer::render(const Body& body) {
  std::string out;
  exec(body, out);
  return out;
}

Value Renderer::lookup(const std::string& name) const {
  for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame)
    for (auto it = frame->rbegin(); it != frame->rend(); ++it)
      if (it->first == name) return it->second;
  return Value::undefined(string_repr(name) + " is undefined");
}

void Renderer::assign(const std::string& name, Value v) {
  for (auto& kv : frames_.back()) {
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  }
  frames_.back().emplace_back(name, std::move(v));
}

void Renderer::unpack_into(const std::vector<std::string>& names, const Value& v) {
  if (names.size() == 1) {
    assign(names[0], v);
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() < names.size())
    fail("not enough values to unpack (expected " + std::to_string(names.size()) + ", got " + std::to_string(items.size()) + ")");
  if (items.size() > names.size()) fail("too many values to unpack (expected " + std::to_string(names.size()) + ")");
  for (std::size_t i = 0; i < names.size(); ++i) assign(names[i], items[i]);
}

Renderer::Flow Renderer::exec(const Body& body, std::string& out) {
  for (const auto& stmt : body) {
    Flow flow = exec_stmt(*stmt, out);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_stmt(const Stmt& s, std::string& out) {
  try {
    switch (s.kind) {
      case StmtKind::Data: out += s.text; break;
      case StmtKind::Output: out += to_str(eval(*s.expr)); break;
      case StmtKind::If: return exec_if(s, out);
      case StmtKind::For: return exec_for(s, out);
      case StmtKind::Set:
      case StmtKind::SetBlock: exec_set(s, out); break;
      case StmtKind::Macro: exec_macro(s); break;
      case StmtKind::CallBlock: exec_call_block(s, out); break;
      case StmtKind::FilterBlock: {
        Value text = Value::from(render_captured(s.body));
        out += to_str(apply_filter_chain(*this, *s.filter, text, [this](const Expr& e) { return eval_args(e); }));
        break;
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
      case StmtKind::Generation: return exec(s.body, out);
    }
  } catch (TemplateError& e) {
    if (e.line == 0) e.line = s.line;
    throw;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_if(const Stmt& s, std::string& out) {
  for (const auto& branch : s.branches)
    if (!branch.first || truthy(eval(*branch.first))) return exec(branch.second, out);
  return Flow::Normal;
}

namespace {

Value loop_object(const std::vector<Value>& items, std::size_t i) {
  auto loop = std::make_shared<Dict>();
  auto n = static_cast<std::int64_t>(items.size()), index = static_cast<std::int64_t>(i);
  auto put = [&](const char* key, Value v) { loop->items.emplace_back(Value::from(key), std::move(v)); };
  put("index", Value::from(index + 1));
  put("index0", Value::from(index));
  put("revindex", Value::from(n - index));
  put("revindex0", Value::from(n - index - 1));
  put("first", Value::from(i == 0));
  put("last", Value::from(index == n - 1));
  put("length", Value::from(n));
  put("depth", Value::from(std::int64_t{1}));
  put("depth0", Value::from(std::int64_t{0}));
  put("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  put("nextitem", index + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  put("cycle", make_function("cycle", [index](Renderer&, const CallArgs& a) {
        if (a.positional.empty()) fail("no items for cycling given");
        return a.positional[static_cast<std::size_t>(index) % a.positional.size()];
      }));
  return Value::from(loop);
}

}  // namespace

Renderer::Flow Renderer::exec_for(const Stmt& s, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr));
  if (s.condition) {
    std::vector<Value> kept;
    for (const auto& item : items) {
      frames_.emplace_back();
      unpack_into(s.targets, item);
      bool keep = truthy(eval(*s.condition));
      frames_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.else_body, out);  // a break there leaves the enclosing loop
  for (std::size_t i = 0; i < items.size(); ++i) {
    frames_.emplace_back();
    frames_.back().emplace_back("loop", loop_object(items, i));
    unpack_into(s.targets, items[i]);
    Flow flow = exec(s.body, out);
    frames_.pop_back();
    if (flow == Flow::Break) break;
  }
  return Flow::Normal;
}

void Renderer::exec_set(const Stmt& s, std::string& out) {
  if (s.kind == StmtKind::SetBlock) {
    Value text = Value::from(render_captured(s.body));
    if (s.filter) text = apply_filter_chain(*this, *s.filter, text, [this](const Expr& e) { return eval_args(e); });
    assign(s.targets[0], text);
    return;
  }
  Value v = eval(*s.expr);
  if (!s.attr_target) {
    unpack_into(s.targets, v);
    return;
  }
  Value ns = eval(*s.attr_target->target);
  if (!ns.is_dict() || !ns.dict->is_namespace) fail("cannot assign attribute on non-namespace object");
  if (!s.attr_target->name.empty() && s.attr_target->name[0] == '_')
    fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got " +
         string_repr(s.attr_target->name) + ". Please rename the attribute.");
  ns.dict->set(Value::from(s.attr_target->name), v);
}

std::string Renderer::render_captured(const Body& body) {
  std::string captured;
  exec(body, captured);
  return captured;
}

// A macro runs in a fresh scope on top of the globals, the template's top level and the scopes where
// it was defined (a caller block sees its loop variables); its output is its return value.
Value Renderer::make_macro(const Stmt& s, bool is_caller) {
  const Stmt* stmt = &s;
  std::vector<Frame> enclosing(frames_.begin() + 2, frames_.end());
  std::string name = is_caller ? "caller" : s.text;
  return make_function(name, [stmt, enclosing, name](Renderer& r, const CallArgs& a) {
    if (++r.depth_ > kMaxDepth) fail("maximum recursion depth exceeded");
    std::vector<Frame> saved = std::move(r.frames_);
    r.frames_ = {saved[0], saved[1]};
    r.frames_.insert(r.frames_.end(), enclosing.begin(), enclosing.end());
    r.frames_.emplace_back();
    List varargs;
    auto kwargs = std::make_shared<Dict>();
    for (std::size_t i = 0; i < a.positional.size(); ++i) {
      if (i < stmt->params.size()) r.assign(stmt->params[i].name, a.positional[i]);
      else varargs.push_back(a.positional[i]);
    }
    for (const auto& kv : a.keyword) {
      bool is_param = std::any_of(stmt->params.begin(), stmt->params.end(), [&](const MacroParam& p) { return p.name == kv.first; });
      if (is_param || kv.first == "caller") r.assign(kv.first, kv.second);
      else kwargs->set(Value::from(kv.first), kv.second);
    }
    for (std::size_t i = a.positional.size(); i < stmt->params.size(); ++i) {
      const MacroParam& p = stmt->params[i];
      bool given = std::any_of(a.keyword.begin(), a.keyword.end(), [&](const auto& kv) { return kv.first == p.name; });
      if (!given) r.assign(p.name, p.default_value ? r.eval(*p.default_value) : Value::undefined("parameter " + string_repr(p.name) + " was not provided"));
    }
    r.assign("varargs", Value::from(std::move(varargs), true));
    r.assign("kwargs", Value::from(kwargs));
    std::string out;
    try {
      r.exec(stmt->body, out);
    } catch (...) {
      r.frames_ = std::move(saved);
      --r.depth_;
      throw;
    }
    r.frames_ = std::move(saved);
    --r.depth_;
    return Value::from(out);  // without autoescape a macro returns a plain str
  });
}

void Renderer::exec_macro(const Stmt& s) { assign(s.text, make_macro(s, false)); }

void Renderer::exec_call_block(const Stmt& s, std::string& out) {
  const Expr& call = *s.expr;
  Value fn = eval(*call.target);
  CallArgs args = eval_args(call);
  args.keyword.emplace_back("caller", make_macro(s, true));
  out += to_str(this->call(fn, args));
}

Value Renderer::call(const Value& fn, const CallArgs& args) {
  if (fn.is_undefined()) fail(fn.text.empty() ? "'Undefined' is undefined" : fn.text);
  if (fn.kind != Kind::Callable) fail("'" + type_name(fn) + "' object is not callable");
  return fn.callable->call(*this, args);
}

Value Renderer::apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) fail("No filter named " + string_repr(name) + " found.");
  return f(*this, v, args);
}

bool Renderer::apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) fail("No test named " + string_repr(name) + " found.");
  return t(*this, v, args);
}

CallArgs Renderer::eval_args(const Expr& e) {
  CallArgs args;
  for (const auto& a : e.args) args.positional.push_back(eval(*a));
  if (e.dyn_args)
    for (auto& v : iterate(eval(*e.dyn_args))) args.positional.push_back(v);
  for (const auto& kv : e.kwargs) args.keyword.emplace_back(kv.first, eval(*kv.second));
  if (e.dyn_kwargs) {
    Value d = eval(*e.dyn_kwargs);
    if (!d.is_dict()) fail("argument after ** must be a mapping, not " + type_name(d));
    for (const auto& kv : d.dict->items) args.keyword.emplace_back(to_str(kv.first), kv.second);
  }
  return args;
}

Value Renderer::eval(const Expr& e) {
  try {
    return eval_inner(e);
  } catch (TemplateError& error) {
    if (error.line == 0) error.line = e.line;
    throw;
  }
}

Value Renderer::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (std::size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = equal(left, right);
    else if (op == "!=") ok = !equal(left, right);
    else if (op == "in") ok = contains(right, left);
    else if (op == "not in") ok = !contains(right, left);
    else {
      int c = compare(left, right, op.c_str());
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value::from(false);
    left = std::move(right);
  }
  return Value::from(true);
}

Value Renderer::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Literal: return e.literal;
    case ExprKind::Name: return lookup(e.name);
    case ExprKind::Attr: return get_attr(eval(*e.target), e.name);
    case ExprKind::Item: return get_item(eval(*e.target), eval(*e.args[0]));
    case ExprKind::Slice: {
      Value obj = eval(*e.target);
      auto part = [&](std::size_t i) { return e.args[i] ? eval(*e.args[i]) : Value::none(); };
      return slice(obj, part(0), part(1), part(2));
    }
    case ExprKind::Call: {
      Value fn = eval(*e.target);
      return call(fn, eval_args(e));
    }
    case ExprKind::Filter: return apply_filter(e.name, eval(*e.target), eval_args(e));
    case ExprKind::Test: return Value::from(apply_test(e.name, eval(*e.target), eval_args(e)));
    case ExprKind::Unary: {
      Value v = eval(*e.args[0]);
      check_defined(v);
      if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
      if (e.name == "+") return v.kind == Kind::Bool ? Value::from(v.as_int()) : v;
      return v.kind == Kind::Float ? Value::from(-v.number) : Value::from(-v.as_int());
    }
    case ExprKind::Binary: return binary_op(e.name, eval(*e.args[0]), eval(*e.args[1]));
    case ExprKind::And: {
      Value left = eval(*e.args[0]);
      return truthy(left) ? eval(*e.args[1]) : left;
    }
    case ExprKind::Or: {
      Value left = eval(*e.args[0]);
      return truthy(left) ? left : eval(*e.args[1]);
    }
    case ExprKind::Not: return Value::from(!truthy(eval(*e.args[0])));
    case ExprKind::Compare: return eval_compare(e);
    case ExprKind::CondExpr: {
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::ListLit:
    case ExprKind::TupleLit: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value::from(std::move(items), e.kind == ExprKind::TupleLit);
    }
    case ExprKind::DictLit: {
      auto d = std::make_shared<Dict>();
      for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) d->set(eval(*e.args[i]), eval(*e.args[i + 1]));
      return Value::from(d);
    }
  }
  return Value::undefined();
}

}  // namespace rayless::jinja::detail
