// Parser: tokens to the syntax tree, with jinja2's operator precedence (low to high): `x if c else y`,
// or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then postfix `.a [i] (args)`
// and `|filter` / `is test`.
#include "chat/jinja_internal.h"

#include <set>

namespace rayless::jinja::detail {
namespace {

std::string join_quoted(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? " or '" : "'") + names[i] + "'";
  return out;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != Tok::End) fail_at(cur(), "unexpected token");
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail_at(const Token& t, const std::string& why) const { throw TemplateError(why, t.line); }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Name: return "'" + t.text + "'";
      case Tok::Op: return "'" + t.text + "'";
      case Tok::String: return "string";
      case Tok::Int: return "integer";
      case Tok::Float: return "float";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::VarEnd: return "end of print statement";
      case Tok::End: return "end of template";
      default: return "token";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_at(cur(), std::string("expected token '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_at(cur(), "expected token 'name', got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail_at(cur(), "expected token 'end of statement block', got " + describe(cur()));
    next();
  }
  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----
  Body parse_body(const std::vector<std::string>& end_tags);
  StmtPtr parse_statement();
  StmtPtr parse_if(int line);
  StmtPtr parse_for(int line);
  StmtPtr parse_set(int line);
  StmtPtr parse_macro(int line);
  StmtPtr parse_call_block(int line);
  StmtPtr parse_filter_block(int line);
  std::vector<MacroParam> parse_params();
  std::vector<std::string> parse_target_names();
  std::string end_tag_of(const Body&) const;

  // ---- expressions ----
  ExprPtr parse_tuple(bool with_condexpr = true);
  ExprPtr parse_expression() { return parse_condexpr(); }
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_binary_level(int level);
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr e);
  void parse_call_args(Expr& call);
  ExprPtr parse_call(ExprPtr target);  // target(args...)
  ExprPtr parse_filter(ExprPtr e);
  ExprPtr parse_test(ExprPtr e);

  const std::vector<Token>& t_;
  std::size_t i_ = 0;
  std::vector<std::string> open_blocks_;  // for "the innermost block that needs to be closed"
  int conditional_depth_ = 0;     // inside {% if %} or `x if c`: jinja2 checks filter names only at run time
  std::vector<ExprPtr> unchecked_;  // filters and tests to check at the end of the statement
  void check_names();
  void remember_name(const ExprPtr& e);
};

Body Parser::parse_body(const std::vector<std::string>& end_tags) {
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == Tok::End) {
      if (end_tags.empty()) return body;
      fail_at(t, "Unexpected end of template. Jinja was looking for the following tags: " + join_quoted(end_tags) +
                     ". The innermost block that needs to be closed is '" + open_blocks_.back() + "'.");
    }
    if (t.type == Tok::Data) {
      auto s = std::make_shared<Stmt>();
      s->kind = StmtKind::Data;
      s->line = t.line;
      s->text = next().text;
      body.push_back(s);
    } else if (t.type == Tok::VarBegin) {
      next();
      auto s = std::make_shared<Stmt>();
      s->kind = StmtKind::Output;
      s->line = t.line;
      s->expr = parse_tuple();
      if (cur().type != Tok::VarEnd) fail_at(cur(), "expected token 'end of print statement', got " + describe(cur()));
      next();
      body.push_back(s);
      check_names();
    } else if (t.type == Tok::BlockBegin) {
      const Token& tag = peek();
      for (const auto& end : end_tags)
        if (tag.type == Tok::Name && tag.text == end) return body;  // the caller consumes the tag
      next();
      body.push_back(parse_statement());
      check_names();
    } else {
      fail_at(t, "unexpected " + describe(t));
    }
  }
}

StmtPtr Parser::parse_statement() {
  const Token& tag = cur();
  if (tag.type != Tok::Name) fail_at(tag, "tag name expected");
  std::string name = next().text;
  int line = tag.line;
  if (name == "if") return parse_if(line);
  if (name == "for") return parse_for(line);
  if (name == "set") return parse_set(line);
  if (name == "macro") return parse_macro(line);
  if (name == "call") return parse_call_block(line);
  if (name == "filter") return parse_filter_block(line);
  auto s = std::make_shared<Stmt>();
  s->line = line;
  if (name == "break" || name == "continue") {
    s->kind = name == "break" ? StmtKind::Break : StmtKind::Continue;
    expect_block_end();
    return s;
  }
  if (name == "generation") {
    s->kind = StmtKind::Generation;
    expect_block_end();
    open_blocks_.push_back("generation");
    s->body = parse_body({"endgeneration"});
    open_blocks_.pop_back();
    next(), next();
    expect_block_end();
    return s;
  }
  std::string why = "Encountered unknown tag '" + name + "'.";
  if (!open_blocks_.empty()) why += " The innermost block that needs to be closed is '" + open_blocks_.back() + "'.";
  fail_at(tag, why);
}

StmtPtr Parser::parse_if(int line) {
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::If;
  s->line = line;
  open_blocks_.push_back("if");
  ++conditional_depth_;
  ExprPtr cond = parse_tuple(false);
  while (true) {
    expect_block_end();
    Body body = parse_body({"elif", "else", "endif"});
    s->branches.emplace_back(cond, std::move(body));
    next();  // BlockBegin
    std::string tag = next().text;
    if (tag == "elif") {
      cond = parse_tuple(false);
    } else if (tag == "else") {
      expect_block_end();
      s->branches.emplace_back(nullptr, parse_body({"endif"}));
      next(), next();
      break;
    } else {
      break;
    }
  }
  expect_block_end();
  open_blocks_.pop_back();
  --conditional_depth_;
  return s;
}

std::vector<std::string> Parser::parse_target_names() {
  std::vector<std::string> names;
  bool paren = skip_op("(");
  names.push_back(expect_name());
  while (skip_op(",")) {
    if (cur().type != Tok::Name || is_name("in")) break;
    names.push_back(expect_name());
  }
  if (paren) expect_op(")");
  return names;
}

StmtPtr Parser::parse_for(int line) {
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::For;
  s->line = line;
  open_blocks_.push_back("for");
  s->targets = parse_target_names();
  if (!skip_name("in")) fail_at(cur(), "expected token 'in', got " + describe(cur()));
  s->expr = parse_tuple(false);
  if (skip_name("if")) s->condition = parse_expression();
  if (is_name("recursive")) fail_at(cur(), "recursive loops are not supported");
  expect_block_end();
  s->body = parse_body({"endfor", "else"});
  next();
  if (next().text == "else") {
    expect_block_end();
    s->else_body = parse_body({"endfor"});
    next(), next();
  }
  expect_block_end();
  open_blocks_.pop_back();
  return s;
}

StmtPtr Parser::parse_set(int line) {
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::Set;
  s->line = line;
  if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
    auto attr = node(ExprKind::Attr, cur().line);
    attr->target = node(ExprKind::Name, cur().line);
    attr->target->name = next().text;
    next();
    attr->name = expect_name();
    s->attr_target = attr;
  } else {
    s->targets = parse_target_names();
  }
  if (skip_op("=")) {
    s->expr = parse_tuple();
    expect_block_end();
    return s;
  }
  if (s->attr_target || s->targets.size() != 1) fail_at(cur(), "expected token '=', got " + describe(cur()));
  s->kind = StmtKind::SetBlock;
  if (is_op("|")) s->filter = parse_filter_expr(node(ExprKind::Literal, line));
  expect_block_end();
  open_blocks_.push_back("set");
  s->body = parse_body({"endset"});
  open_blocks_.pop_back();
  next(), next();
  expect_block_end();
  return s;
}

std::vector<MacroParam> Parser::parse_params() {
  std::vector<MacroParam> params;
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    MacroParam p;
    p.name = expect_name();
    if (skip_op("=")) p.default_value = parse_expression();
    else if (!params.empty() && params.back().default_value) fail_at(cur(), "non-default argument follows default argument");
    params.push_back(p);
  }
  next();
  return params;
}

StmtPtr Parser::parse_macro(int line) {
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::Macro;
  s->line = line;
  s->text = expect_name();
  s->params = parse_params();
  expect_block_end();
  open_blocks_.push_back("macro");
  s->body = parse_body({"endmacro"});
  open_blocks_.pop_back();
  next(), next();
  if (cur().type == Tok::Name) next();  // {% endmacro name %}
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_call_block(int line) {
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::CallBlock;
  s->line = line;
  if (is_op("(")) s->params = parse_params();
  s->expr = parse_expression();
  if (s->expr->kind != ExprKind::Call) fail_at(cur(), "expected call");
  expect_block_end();
  open_blocks_.push_back("call");
  s->body = parse_body({"endcall"});
  open_blocks_.pop_back();
  next(), next();
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_filter_block(int line) {
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::FilterBlock;
  s->line = line;
  auto placeholder = node(ExprKind::Literal, line);
  s->filter = parse_filter(placeholder);
  while (is_op("|")) s->filter = parse_filter(s->filter);
  expect_block_end();
  open_blocks_.push_back("filter");
  s->body = parse_body({"endfilter"});
  open_blocks_.pop_back();
  next(), next();
  expect_block_end();
  return s;
}

// ---- expressions ----

ExprPtr Parser::parse_tuple(bool with_condexpr) {
  int line = cur().line;
  std::vector<ExprPtr> items;
  bool saw_comma = false;
  while (true) {
    if (!items.empty()) {
      if (!skip_op(",")) break;
      saw_comma = true;
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) break;
    }
    items.push_back(with_condexpr ? parse_expression() : parse_or());
  }
  if (!saw_comma) return items[0];
  auto t = node(ExprKind::TupleLit, line);
  t->args = std::move(items);
  return t;
}

// `value if cond else other`: jinja2 checks filter and test names at compile time except inside an
// if, so names used in `value` are dropped from the check once an `if` follows it.
ExprPtr Parser::parse_condexpr() {
  std::size_t unchecked_from = unchecked_.size();
  ExprPtr value = parse_or();
  if (!is_name("if")) return value;
  unchecked_.resize(unchecked_from);
  ++conditional_depth_;
  while (is_name("if")) {
    int line = next().line;
    auto c = node(ExprKind::CondExpr, line);
    c->args.push_back(parse_or());  // condition
    c->args.push_back(value);
    c->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
    value = c;
  }
  --conditional_depth_;
  return value;
}

// Called between statements: unknown filters and tests outside any if are errors already at parse time.
void Parser::check_names() {
  for (const auto& e : unchecked_) {
    bool is_filter = e->kind == ExprKind::Filter;
    bool known = is_filter ? find_filter(e->name) != nullptr : find_test(e->name) != nullptr;
    if (!known) throw TemplateError(std::string("No ") + (is_filter ? "filter" : "test") + " named " + string_repr(e->name) + ".", e->line);
  }
  unchecked_.clear();
}

void Parser::remember_name(const ExprPtr& e) {
  if (conditional_depth_ == 0) unchecked_.push_back(e);
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    auto e = node(ExprKind::Or, next().line);
    e->args = {left, parse_and()};
    left = e;
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    auto e = node(ExprKind::And, next().line);
    e->args = {left, parse_not()};
    left = e;
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    auto e = node(ExprKind::Not, next().line);
    e->args = {parse_not()};
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  int line = cur().line;
  ExprPtr first = parse_binary_level(0);
  auto cmp = node(ExprKind::Compare, line);
  cmp->args.push_back(first);
  static const std::set<std::string> ops = {"==", "!=", "<", "<=", ">", ">="};
  while (true) {
    if (cur().type == Tok::Op && ops.count(cur().text)) {
      cmp->ops.push_back(next().text);
    } else if (is_name("in")) {
      next();
      cmp->ops.push_back("in");
    } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
      next(), next();
      cmp->ops.push_back("not in");
    } else {
      break;
    }
    cmp->args.push_back(parse_binary_level(0));
  }
  return cmp->ops.empty() ? first : cmp;
}

// Levels: 0: + -, 1: ~, 2: * / // %, 3: **
ExprPtr Parser::parse_binary_level(int level) {
  static const std::vector<std::vector<std::string>> levels = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  auto operand = [&]() { return level == 3 ? parse_unary() : parse_binary_level(level + 1); };
  ExprPtr left = operand();
  while (cur().type == Tok::Op) {
    const auto& ops = levels[level];
    if (std::find(ops.begin(), ops.end(), cur().text) == ops.end()) break;
    auto e = node(ExprKind::Binary, cur().line);
    e->name = next().text;
    e->args = {left, operand()};
    left = e;
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = node(ExprKind::Unary, cur().line);
    e->name = next().text;
    e->args = {parse_unary(false)};
  } else {
    e = parse_primary();
  }
  e = parse_postfix(e);
  return with_filter ? parse_filter_expr(e) : e;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  auto lit = node(ExprKind::Literal, t.line);
  if (t.type == Tok::Name) {
    next();
    if (t.text == "true" || t.text == "True") lit->literal = Value::from(true);
    else if (t.text == "false" || t.text == "False") lit->literal = Value::from(false);
    else if (t.text == "none" || t.text == "None") lit->literal = Value::none();
    else {
      auto n = node(ExprKind::Name, t.line);
      n->name = t.text;
      return n;
    }
    return lit;
  }
  if (t.type == Tok::String) {
    std::string s;
    while (cur().type == Tok::String) s += next().text;
    lit->literal = Value::from(s);
    return lit;
  }
  if (t.type == Tok::Int || t.type == Tok::Float) {
    next();
    lit->literal = t.type == Tok::Int ? Value::from(t.integer) : Value::from(t.number);
    return lit;
  }
  if (skip_op("(")) {
    if (skip_op(")")) {
      lit->literal = Value::from(List{}, true);
      return lit;
    }
    ExprPtr inner = parse_tuple();
    expect_op(")");
    return inner;
  }
  if (is_op("[") || is_op("{")) {
    bool is_dict = next().text == "{";
    auto e = node(is_dict ? ExprKind::DictLit : ExprKind::ListLit, t.line);
    const char* close = is_dict ? "}" : "]";
    while (!is_op(close)) {
      if (!e->args.empty()) {
        expect_op(",");
        if (is_op(close)) break;
      }
      e->args.push_back(parse_expression());
      if (is_dict) {
        expect_op(":");
        e->args.push_back(parse_expression());
      }
    }
    next();
    return e;
  }
  fail_at(t, "unexpected " + describe(t));
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".")) {
      int line = next().line;
      if (cur().type == Tok::Int) {
        auto item = node(ExprKind::Item, line);
        item->target = e;
        auto key = node(ExprKind::Literal, line);
        key->literal = Value::from(next().integer);
        item->args = {key};
        e = item;
      } else {
        auto attr = node(ExprKind::Attr, line);
        attr->target = e;
        attr->name = expect_name();
        e = attr;
      }
    } else if (is_op("[")) {
      e = parse_subscript(e);
    } else if (is_op("(")) {
      e = parse_call(e);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr e) {
  int line = next().line;
  std::vector<ExprPtr> parts(1);
  bool is_slice = false;
  while (!is_op("]")) {
    if (skip_op(":")) {
      is_slice = true;
      parts.emplace_back();
      continue;
    }
    if (parts.back()) fail_at(cur(), "expected token ']', got " + describe(cur()));
    parts.back() = parse_expression();
  }
  next();
  if (!is_slice && !parts[0]) fail_at(cur(), "expected an index");
  if (parts.size() > 3) fail_at(cur(), "invalid slice");
  auto out = node(is_slice ? ExprKind::Slice : ExprKind::Item, line);
  out->target = e;
  parts.resize(is_slice ? 3 : 1);
  out->args = parts;
  return out;
}

ExprPtr Parser::parse_call(ExprPtr target) {
  auto call = node(ExprKind::Call, cur().line);
  call->target = target;
  parse_call_args(*call);
  return call;
}

void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) {
      expect_op(",");
      if (is_op(")")) break;
    }
    first = false;
    if (skip_op("**")) {
      call.dyn_kwargs = parse_expression();
    } else if (skip_op("*")) {
      call.dyn_args = parse_expression();
    } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
      std::string name = next().text;
      next();
      call.kwargs.emplace_back(name, parse_expression());
    } else {
      if (!call.kwargs.empty()) fail_at(cur(), "Invalid argument syntax: positional argument after keyword argument");
      call.args.push_back(parse_expression());
    }
  }
  next();
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      e = parse_filter(e);
    } else if (is_name("is")) {
      e = parse_test(e);
    } else if (is_op("(")) {
      e = parse_call(e);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_filter(ExprPtr e) {
  if (is_op("|")) next();
  auto f = node(ExprKind::Filter, cur().line);
  f->target = e;
  f->name = expect_name();
  while (is_op(".") && peek().type == Tok::Name) {
    next();
    f->name += "." + next().text;
  }
  if (is_op("(")) parse_call_args(*f);
  remember_name(f);
  return f;
}

ExprPtr Parser::parse_test(ExprPtr e) {
  next();  // is
  bool negated = skip_name("not");
  auto t = node(ExprKind::Test, cur().line);
  t->target = e;
  t->name = expect_name();
  while (is_op(".") && peek().type == Tok::Name) {
    next();
    t->name += "." + next().text;
  }
  const Token& c = cur();
  bool starts_arg = c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int || c.type == Tok::Float ||
                    (c.type == Tok::Op && (c.text == "[" || c.text == "{"));
  if (is_op("(")) {
    parse_call_args(*t);
  } else if (starts_arg && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail_at(c, "You cannot chain multiple tests with is");
    t->args.push_back(parse_postfix(parse_primary()));
  }
  remember_name(t);
  if (!negated) return t;
  auto n = node(ExprKind::Not, t->line);
  n->args = {t};
  return n;
}

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace rayless::jinja::detail
