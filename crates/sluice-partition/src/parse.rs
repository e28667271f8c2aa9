//! The parser of `PARTITION BY …` clauses (methods, expressions, partition definitions).

use crate::err;
use crate::eval::{eval, EV};
use crate::lex::*;
use sluice_types::partition::{
    BoundValue, PartitionDef, PartitionError, PartitionMethod, Partitioning,
};

/// Nesting deeper than this is refused (no stack overflow on hostile input).
pub(crate) const MAX_DEPTH: usize = 64;
/// Expressions with more terms than this are refused (evaluation recurses over the tree).
pub(crate) const MAX_TERMS: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// A partition expression or bound.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    Col(String),
    Int(i128),
    Str(String),
    Null,
    MaxValue,
    Neg(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Call(String, Vec<Expr>),
    Extract(String, Box<Expr>),
}

pub(crate) struct Parser<'a> {
    pub(crate) src: &'a str,
    pub(crate) toks: Vec<Token>,
    pub(crate) pos: usize,
    pub(crate) depth: usize,
    pub(crate) terms: usize,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(src: &'a str) -> Result<Parser<'a>, PartitionError> {
        Ok(Parser {
            src,
            toks: lex(src, true)?,
            pos: 0,
            depth: 0,
            terms: 0,
        })
    }

    pub(crate) fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    pub(crate) fn peek_at(&self, k: usize) -> Option<&Token> {
        self.toks.get(self.pos + k)
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    pub(crate) fn at_word(&self, kw: &str) -> bool {
        self.peek().is_some_and(|t| t.is_word(kw))
    }

    pub(crate) fn eat_word(&mut self, kw: &str) -> bool {
        let yes = self.at_word(kw);
        if yes {
            self.pos += 1;
        }
        yes
    }

    pub(crate) fn at_punct(&self, c: char) -> bool {
        self.peek().is_some_and(|t| t.is_punct(c))
    }

    pub(crate) fn eat_punct(&mut self, c: char) -> bool {
        let yes = self.at_punct(c);
        if yes {
            self.pos += 1;
        }
        yes
    }

    pub(crate) fn found(&self) -> String {
        match self.peek() {
            Some(t) => format!("`{}`", t.describe()),
            None => "the end of the clause".to_string(),
        }
    }

    pub(crate) fn expected<T>(&self, what: &str) -> Result<T, PartitionError> {
        err(format!(
            "partition options: expected {what}, found {}",
            self.found()
        ))
    }

    pub(crate) fn expect_word(&mut self, kw: &str) -> Result<(), PartitionError> {
        if self.eat_word(kw) {
            Ok(())
        } else {
            self.expected(kw)
        }
    }

    pub(crate) fn expect_punct(&mut self, c: char) -> Result<(), PartitionError> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            self.expected(&format!("`{c}`"))
        }
    }

    /// A name: a bare word or a backticked identifier.
    pub(crate) fn ident(&mut self) -> Result<String, PartitionError> {
        match self.peek().map(|t| t.tok.clone()) {
            Some(Tok::Word(w)) | Some(Tok::QIdent(w)) => {
                self.pos += 1;
                Ok(w)
            }
            _ => self.expected("a name"),
        }
    }

    pub(crate) fn number(&mut self) -> Result<u64, PartitionError> {
        match self.peek().map(|t| t.tok.clone()) {
            Some(Tok::Num(n)) => match n.parse::<u64>() {
                Ok(v) => {
                    self.pos += 1;
                    Ok(v)
                }
                Err(_) => err(format!("partition options: `{n}` is not a count")),
            },
            _ => self.expected("a number"),
        }
    }

    /// At `(`: skips to the matching `)` and returns the text in between.
    pub(crate) fn group_text(&mut self) -> Result<String, PartitionError> {
        let open = match self.peek() {
            Some(t) if t.is_punct('(') => t.end,
            _ => return self.expected("`(`"),
        };
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            let close = t.start;
            match t.tok {
                Tok::Punct('(') => depth += 1,
                Tok::Punct(')') => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos += 1;
                        return Ok(self.src[open..close].trim().to_string());
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
        err("partition options: unbalanced parentheses")
    }

    /// `( name, … )`, possibly empty.
    pub(crate) fn column_list(&mut self) -> Result<Vec<String>, PartitionError> {
        self.expect_punct('(')?;
        let mut cols = Vec::new();
        if self.eat_punct(')') {
            return Ok(cols);
        }
        loop {
            cols.push(self.ident()?);
            if self.eat_punct(',') {
                continue;
            }
            self.expect_punct(')')?;
            return Ok(cols);
        }
    }

    pub(crate) fn expr(&mut self, min_prec: u8) -> Result<Expr, PartitionError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err("partition expression nested too deeply");
        }
        let mut lhs = self.unary()?;
        loop {
            let (op, prec) = match self.peek().map(|t| &t.tok) {
                Some(Tok::Punct('+')) => (BinOp::Add, 1),
                Some(Tok::Punct('-')) => (BinOp::Sub, 1),
                Some(Tok::Punct('*')) => (BinOp::Mul, 2),
                Some(Tok::Punct('%')) => (BinOp::Mod, 2),
                Some(Tok::Word(w)) if w.eq_ignore_ascii_case("DIV") => (BinOp::Div, 2),
                Some(Tok::Word(w)) if w.eq_ignore_ascii_case("MOD") => (BinOp::Mod, 2),
                Some(Tok::Punct('/')) => {
                    return err(
                        "partition expression: `/` is not supported (it yields a DECIMAL; the \
                         server accepts only integer partition expressions, use DIV)",
                    )
                }
                _ => break,
            };
            if prec < min_prec {
                break;
            }
            self.pos += 1;
            let rhs = self.expr(prec + 1)?;
            lhs = Expr::Bin(op, Box::new(lhs), Box::new(rhs));
        }
        self.depth -= 1;
        Ok(lhs)
    }

    pub(crate) fn unary(&mut self) -> Result<Expr, PartitionError> {
        if self.eat_punct('-') {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return err("partition expression nested too deeply");
            }
            let e = self.unary()?;
            self.depth -= 1;
            return Ok(match e {
                Expr::Int(v) => Expr::Int(-v),
                e => Expr::Neg(Box::new(e)),
            });
        }
        while self.eat_punct('+') {}
        self.terms += 1;
        if self.terms > MAX_TERMS {
            return err("partition expression has too many terms");
        }
        self.primary()
    }

    pub(crate) fn primary(&mut self) -> Result<Expr, PartitionError> {
        let Some(t) = self.peek().cloned() else {
            return self.expected("an expression");
        };
        self.pos += 1;
        match t.tok {
            Tok::Num(n) => parse_int_literal(&n).map(Expr::Int),
            Tok::Str(s) => Ok(Expr::Str(s)),
            Tok::QIdent(c) => self.column_ref(c),
            Tok::Punct('(') => {
                let e = self.expr(0)?;
                self.expect_punct(')')?;
                Ok(e)
            }
            Tok::Word(w) => {
                let upper = w.to_ascii_uppercase();
                let next_str = matches!(self.peek().map(|t| &t.tok), Some(Tok::Str(_)));
                match upper.as_str() {
                    "NULL" => return Ok(Expr::Null),
                    "MAXVALUE" => return Ok(Expr::MaxValue),
                    "TRUE" => return Ok(Expr::Int(1)),
                    "FALSE" => return Ok(Expr::Int(0)),
                    // Charset introducers: _utf8mb4'…', N'…'.
                    _ if next_str && (upper.starts_with('_') || upper == "N") => {
                        return self.primary();
                    }
                    "X" | "B" if next_str => {
                        return err(format!(
                            "partition options: {upper}'…' literals are not supported"
                        ))
                    }
                    _ => {}
                }
                if !self.at_punct('(') {
                    return self.column_ref(w);
                }
                self.pos += 1;
                if upper == "EXTRACT" {
                    let unit = self.ident()?.to_ascii_uppercase();
                    self.expect_word("FROM")?;
                    let arg = self.expr(0)?;
                    self.expect_punct(')')?;
                    return Ok(Expr::Extract(unit, Box::new(arg)));
                }
                let mut args = Vec::new();
                if !self.eat_punct(')') {
                    loop {
                        args.push(self.expr(0)?);
                        if self.eat_punct(',') {
                            continue;
                        }
                        self.expect_punct(')')?;
                        break;
                    }
                }
                Ok(Expr::Call(upper, args))
            }
            Tok::Punct(c) => err(format!(
                "partition options: unexpected `{c}` in an expression"
            )),
        }
    }

    /// A column, possibly qualified (`t.c`, `db.t.c`): the last part names it.
    pub(crate) fn column_ref(&mut self, first: String) -> Result<Expr, PartitionError> {
        let mut name = first;
        while self.at_punct('.') {
            self.pos += 1;
            name = self.ident()?;
        }
        Ok(Expr::Col(name))
    }

    /// Skips partition options (`ENGINE = …`, `COMMENT …`, `(SUBPARTITION …)`) up to the `,`
    /// or `)` that ends a partition definition (or the end: the caller checks what must follow).
    pub(crate) fn skip_options(&mut self) -> Result<(), PartitionError> {
        loop {
            match self.peek().map(|t| &t.tok) {
                None | Some(Tok::Punct(',')) | Some(Tok::Punct(')')) => return Ok(()),
                Some(Tok::Punct('(')) => {
                    self.group_text()?;
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    /// A constant bound: `MAXVALUE`, NULL, a literal or a constant expression.
    pub(crate) fn bound(&mut self) -> Result<BoundValue, PartitionError> {
        let e = self.expr(0)?;
        const_bound(&e)
    }

    /// `( PARTITION name [VALUES …] [options] [(subpartitions)], … )`.
    pub(crate) fn definitions(
        &mut self,
        method: PartitionMethod,
        ncols: usize,
    ) -> Result<Vec<PartitionDef>, PartitionError> {
        self.expect_punct('(')?;
        let mut defs = Vec::new();
        loop {
            defs.push(self.definition(method, ncols)?);
            if self.eat_punct(',') {
                continue;
            }
            self.expect_punct(')')?;
            return Ok(defs);
        }
    }

    /// `VALUES LESS THAN (…)` or `MAXVALUE` of partition `d` (after `THAN`).
    fn less_than(
        &mut self,
        method: PartitionMethod,
        ncols: usize,
        d: &mut PartitionDef,
    ) -> Result<(), PartitionError> {
        if !matches!(
            method,
            PartitionMethod::Range | PartitionMethod::RangeColumns
        ) {
            return err(format!(
                "partition options: VALUES LESS THAN in partition `{}` of a non-RANGE layout",
                d.name
            ));
        }
        if self.eat_word("MAXVALUE") {
            d.less_than = vec![BoundValue::MaxValue; ncols.max(1)];
        } else {
            d.less_than = self.bound_list()?;
        }
        let want = if method == PartitionMethod::Range {
            1
        } else {
            ncols
        };
        if d.less_than.len() != want {
            return err(format!(
                "partition options: partition `{}` has {} bound values, the layout has {want} columns",
                d.name,
                d.less_than.len()
            ));
        }
        Ok(())
    }

    /// `(b, …)`: a parenthesized list of bound values.
    fn bound_list(&mut self) -> Result<Vec<BoundValue>, PartitionError> {
        self.expect_punct('(')?;
        let mut out = Vec::new();
        loop {
            out.push(self.bound()?);
            if self.eat_punct(',') {
                continue;
            }
            self.expect_punct(')')?;
            return Ok(out);
        }
    }

    /// `VALUES IN (…)` of partition `d` (after `IN`): values, or tuples for LIST COLUMNS of
    /// several columns.
    fn values_in(
        &mut self,
        method: PartitionMethod,
        ncols: usize,
        d: &mut PartitionDef,
    ) -> Result<(), PartitionError> {
        if !matches!(method, PartitionMethod::List | PartitionMethod::ListColumns) {
            return err(format!(
                "partition options: VALUES IN in partition `{}` of a non-LIST layout",
                d.name
            ));
        }
        self.expect_punct('(')?;
        let tuple = method == PartitionMethod::ListColumns && ncols > 1;
        loop {
            if tuple {
                let t = self.bound_list()?;
                if t.len() != ncols {
                    return err(format!(
                        "partition options: a value of partition `{}` has {} columns, the layout has {ncols}",
                        d.name,
                        t.len()
                    ));
                }
                d.values_in.push(t);
            } else {
                d.values_in.push(vec![self.bound()?]);
            }
            if self.eat_punct(',') {
                continue;
            }
            self.expect_punct(')')?;
            return Ok(());
        }
    }

    pub(crate) fn definition(
        &mut self,
        method: PartitionMethod,
        ncols: usize,
    ) -> Result<PartitionDef, PartitionError> {
        self.expect_word("PARTITION")?;
        let mut d = PartitionDef::named(self.ident()?);
        if self.eat_word("VALUES") {
            if self.eat_word("LESS") {
                self.expect_word("THAN")?;
                self.less_than(method, ncols, &mut d)?;
            } else if self.eat_word("IN") {
                self.values_in(method, ncols, &mut d)?;
            } else {
                return self.expected("LESS THAN or IN");
            }
        } else if self.eat_word("DEFAULT") {
            if !matches!(method, PartitionMethod::List | PartitionMethod::ListColumns) {
                return err(format!(
                    "partition options: DEFAULT partition `{}` in a non-LIST layout",
                    d.name
                ));
            }
            d.default_list = true;
        } else if self.eat_word("HISTORY") || self.eat_word("CURRENT") {
            // SYSTEM_TIME partitions.
        }
        match method {
            PartitionMethod::Range | PartitionMethod::RangeColumns if d.less_than.is_empty() => {
                return err(format!(
                    "partition options: RANGE partition `{}` has no VALUES LESS THAN",
                    d.name
                ))
            }
            PartitionMethod::List | PartitionMethod::ListColumns
                if d.values_in.is_empty() && !d.default_list =>
            {
                return err(format!(
                    "partition options: LIST partition `{}` has no VALUES IN",
                    d.name
                ))
            }
            _ => {}
        }
        self.skip_options()?;
        Ok(d)
    }
}

pub(crate) fn parse_int_literal(n: &str) -> Result<i128, PartitionError> {
    let parsed = match n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")) {
        Some(hex) => i128::from_str_radix(hex, 16).ok(),
        None => n.parse::<i128>().ok(),
    };
    match parsed {
        Some(v) if (-(1i128 << 64)..(1i128 << 64)).contains(&v) => Ok(v),
        _ => err(format!(
            "partition options: `{n}` is not an integer literal (partition functions and bounds are integers)"
        )),
    }
}

pub(crate) fn const_bound(e: &Expr) -> Result<BoundValue, PartitionError> {
    Ok(match e {
        Expr::MaxValue => BoundValue::MaxValue,
        Expr::Null => BoundValue::Null,
        Expr::Int(v) => BoundValue::Int(*v),
        Expr::Str(s) => BoundValue::Text(s.clone()),
        e => match eval(e, None)? {
            EV::Null => BoundValue::Null,
            EV::Int(v) => BoundValue::Int(v),
            EV::Str(s) => BoundValue::Text(s),
            other => {
                return err(format!(
                    "partition bound evaluates to {}, not an integer or a string",
                    other.kind()
                ))
            }
        },
    })
}

/// Parses `PARTITION BY …` with the tokens of `clause`.
pub(crate) fn parse_clause(clause: &str) -> Result<Partitioning, PartitionError> {
    let mut p = Parser::new(clause)?;
    p.expect_word("PARTITION")?;
    p.expect_word("BY")?;
    let linear = p.eat_word("LINEAR");
    let mut part = Partitioning {
        method: PartitionMethod::Hash,
        linear,
        expr: String::new(),
        columns: Vec::new(),
        key_algorithm: 2,
        partitions: Vec::new(),
        unsupported: None,
    };
    p.method(&mut part)?;
    let mut count = None;
    if p.eat_word("PARTITIONS") {
        count = Some(p.number()?);
    }
    p.skip_subpartitioning()?;
    if p.at_punct('(') {
        part.partitions = p.definitions(part.method, part.columns.len())?;
    } else {
        part.partitions = unlisted_partitions(part.method, count)?;
    }
    p.eat_punct(';');
    if !p.at_end() {
        return p.expected("the end of the partition options");
    }
    if part.partitions.is_empty() {
        return err("partition options: no partitions");
    }
    Ok(part)
}

impl Parser<'_> {
    /// The partitioning method after `PARTITION BY [LINEAR]`, with its expression or columns.
    fn method(&mut self, part: &mut Partitioning) -> Result<(), PartitionError> {
        let linear = part.linear;
        if self.eat_word("HASH") {
            part.expr = self.group_text()?;
            // Refuse now what could never be evaluated (syntax); functions are checked per row.
            Parser::new(&part.expr)?.whole_expr()?;
        } else if self.eat_word("KEY") {
            part.method = PartitionMethod::Key;
            if self.eat_word("ALGORITHM") {
                self.eat_punct('=');
                part.key_algorithm = match self.number()? {
                    1 => 1,
                    2 => 2,
                    n => {
                        return err(format!(
                            "partition options: KEY ALGORITHM={n} is not 1 or 2"
                        ))
                    }
                };
            }
            part.columns = self.column_list()?;
        } else if self.at_word("RANGE") || self.at_word("LIST") {
            let range = self.eat_word("RANGE");
            if !range {
                self.expect_word("LIST")?;
            }
            if linear {
                return err("partition options: LINEAR applies to HASH and KEY only");
            }
            if self.eat_word("COLUMNS") {
                part.method = if range {
                    PartitionMethod::RangeColumns
                } else {
                    PartitionMethod::ListColumns
                };
                part.columns = self.column_list()?;
                if part.columns.is_empty() {
                    return err(
                        "partition options: COLUMNS partitioning needs at least one column",
                    );
                }
            } else {
                part.method = if range {
                    PartitionMethod::Range
                } else {
                    PartitionMethod::List
                };
                part.expr = self.group_text()?;
                Parser::new(&part.expr)?.whole_expr()?;
            }
        } else if self.eat_word("SYSTEM_TIME") {
            if linear {
                return err("partition options: LINEAR applies to HASH and KEY only");
            }
            part.method = PartitionMethod::SystemTime;
            // [INTERVAL n unit [STARTS ts] | LIMIT n] [AUTO]
            while !self.at_end()
                && !self.at_word("PARTITIONS")
                && !self.at_word("SUBPARTITION")
                && !self.at_punct('(')
            {
                self.pos += 1;
            }
        } else {
            return self.expected("HASH, KEY, RANGE, LIST or SYSTEM_TIME");
        }
        Ok(())
    }

    /// `SUBPARTITION BY …`: rows are placed at the partition level only, so it is skipped.
    fn skip_subpartitioning(&mut self) -> Result<(), PartitionError> {
        if self.eat_word("SUBPARTITION") {
            // Rows are placed at the partition level only: the subpartitioning is skipped.
            self.expect_word("BY")?;
            self.eat_word("LINEAR");
            if self.eat_word("HASH") {
                self.group_text()?;
            } else if self.eat_word("KEY") {
                if self.eat_word("ALGORITHM") {
                    self.eat_punct('=');
                    self.number()?;
                }
                self.group_text()?;
            } else {
                return self.expected("HASH or KEY after SUBPARTITION BY");
            }
            if self.eat_word("SUBPARTITIONS") {
                self.number()?;
            }
        }
        Ok(())
    }
}

/// The partitions of a layout without a definition list: HASH and KEY get `p0`…; SYSTEM_TIME
/// gets history partitions `p0`… and the current one `pn`, as MariaDB names them.
fn unlisted_partitions(
    method: PartitionMethod,
    count: Option<u64>,
) -> Result<Vec<PartitionDef>, PartitionError> {
    match method {
        PartitionMethod::Hash | PartitionMethod::Key => default_names(0, count.unwrap_or(1)),
        PartitionMethod::SystemTime => {
            let n = count.unwrap_or(2).max(2);
            let mut parts = default_names(0, n - 1)?;
            parts.push(PartitionDef::named("pn"));
            Ok(parts)
        }
        _ => err("partition options: RANGE and LIST partitioning need a partition definition list"),
    }
}

/// Partitions `p{from}` … `p{from+n-1}` (the names the server gives HASH/KEY partitions).
pub(crate) fn default_names(from: usize, n: u64) -> Result<Vec<PartitionDef>, PartitionError> {
    // The server allows at most 8192 partitions.
    if n == 0 || n > 8192 {
        return err(format!(
            "partition options: {n} partitions (the server allows 1 to 8192)"
        ));
    }
    Ok((0..n as usize)
        .map(|i| PartitionDef::named(format!("p{}", from + i)))
        .collect())
}

impl Parser<'_> {
    /// The whole input as one expression.
    pub(crate) fn whole_expr(&mut self) -> Result<Expr, PartitionError> {
        let e = self.expr(0)?;
        if !self.at_end() {
            return self.expected("the end of the expression");
        }
        Ok(e)
    }
}
