//! Reads `ebpf-probes/usescope.h` and writes its Rust mirror (build.rs's
//! `OUT_DIR/layout.rs`) and a C file that checks this reading against the
//! C compiler (`OUT_DIR/layout_check.c`).
//!
//! The header is kept to a small subset of C, and anything outside it is an
//! error naming the line, so the mirror can never silently differ:
//! - comments (`/* */`, `//`), the include guard (`#ifndef`, a `#define`
//!   without a value, `#endif`) and `_Static_assert(...);` are skipped;
//! - `#define NAME EXPR`: integer literals, earlier defines, `+ - * /`
//!   and parentheses, evaluated as C does for these non-negative values;
//! - `struct NAME { TYPE FIELD[DIM]...; ... };` with TYPE `__u64` or
//!   `__u32` and each DIM an expression as above.
//!
//! Included by build.rs, and by the unit tests in src/probes/layout.rs.

use std::fmt::Write as _;

/// One `#define NAME EXPR`.
pub struct Define {
    pub name: String,
    pub value: u64,
    pub line: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    U32,
    U64,
}

impl Scalar {
    pub fn size(self) -> u64 {
        match self {
            Scalar::U32 => 4,
            Scalar::U64 => 8,
        }
    }

    fn rust(self) -> &'static str {
        match self {
            Scalar::U32 => "u32",
            Scalar::U64 => "u64",
        }
    }
}

pub struct Field {
    pub name: String,
    pub scalar: Scalar,
    /// Array dimensions, outermost first; empty for a plain scalar.
    pub dims: Vec<u64>,
    pub line: usize,
}

impl Field {
    /// Bytes from the first element of dimension `from` on (0: the whole field).
    fn size_from(&self, from: usize) -> u64 {
        self.dims[from..].iter().product::<u64>() * self.scalar.size()
    }
}

pub struct Struct {
    pub name: String,
    pub fields: Vec<Field>,
    pub line: usize,
}

impl Struct {
    /// Each field's byte offset and the struct's size, by C's rules (each
    /// field at a multiple of its alignment, the size a multiple of the
    /// largest), which `#[repr(C)]` follows too.
    pub fn layout(&self) -> (Vec<u64>, u64) {
        let mut offsets = Vec::new();
        let (mut end, mut align) = (0u64, 1u64);
        for f in &self.fields {
            let a = f.scalar.size();
            align = align.max(a);
            let at = end.next_multiple_of(a);
            offsets.push(at);
            end = at + f.size_from(0);
        }
        (offsets, end.next_multiple_of(align))
    }

    /// `runqlat_hist` → `RunqlatHist`.
    pub fn rust_name(&self) -> String {
        self.name
            .split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect()
    }
}

pub struct Header {
    pub defines: Vec<Define>,
    pub structs: Vec<Struct>,
}

/// Parses the header; an error names `file`, the line and the cause.
pub fn parse(file: &str, text: &str) -> Result<Header, String> {
    let clean = strip_comments(text).map_err(|(line, cause)| format!("{file}:{line}: {cause}"))?;
    let mut header = Header {
        defines: Vec::new(),
        structs: Vec::new(),
    };
    let mut open: Option<Struct> = None;
    let mut in_assert = false;
    for (i, raw) in clean.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        let err = |cause: String| format!("{file}:{line}: {cause}: {:?}", l);
        if l.is_empty() {
            continue;
        }
        if in_assert || l.starts_with("_Static_assert") {
            // Checked by the compiler; it may span lines up to its `;`.
            in_assert = !l.ends_with(';');
            continue;
        }
        if let Some(s) = open.as_mut() {
            if l == "};" {
                let s = open.take().expect("open");
                if s.fields.is_empty() {
                    return Err(err(format!("struct {} has no fields", s.name)));
                }
                header.structs.push(s);
            } else {
                let f = field(l, &header.defines).map_err(err)?;
                if s.fields.iter().any(|g| g.name == f.name) {
                    return Err(err(format!("field {} declared twice", f.name)));
                }
                s.fields.push(Field { line, ..f });
            }
            continue;
        }
        if let Some(d) = l.strip_prefix('#') {
            let d = d.trim_start();
            let (word, rest) = split_word(d);
            match word {
                "ifndef" | "endif" => {}
                "define" => {
                    let (name, expr) = split_word(rest);
                    if !is_ident(name) {
                        return Err(err(format!("{name:?} is not a plain macro name")));
                    }
                    if header.defines.iter().any(|d| d.name == name) {
                        return Err(err(format!("{name} defined twice")));
                    }
                    // A define without a value is the include guard.
                    if !expr.is_empty() {
                        let value = eval(expr, &header.defines).map_err(err)?;
                        header.defines.push(Define {
                            name: name.to_string(),
                            value,
                            line,
                        });
                    }
                }
                _ => return Err(err(format!("unsupported preprocessor line #{word}"))),
            }
            continue;
        }
        if let Some(rest) = l.strip_prefix("struct ") {
            let Some(name) = rest
                .strip_suffix('{')
                .map(str::trim)
                .filter(|n| is_ident(n))
            else {
                return Err(err("expected `struct NAME {`".to_string()));
            };
            if header.structs.iter().any(|s| s.name == name) {
                return Err(err(format!("struct {name} defined twice")));
            }
            open = Some(Struct {
                name: name.to_string(),
                fields: Vec::new(),
                line,
            });
            continue;
        }
        return Err(err("not a define, struct or _Static_assert".to_string()));
    }
    if let Some(s) = open {
        return Err(format!(
            "{file}:{}: struct {} is not closed by `}};`",
            s.line, s.name
        ));
    }
    if in_assert {
        return Err(format!("{file}: a _Static_assert is not closed by `;`"));
    }
    Ok(header)
}

/// The text with every comment replaced by spaces, lines kept where they were.
fn strip_comments(text: &str) -> Result<String, (usize, String)> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('/', Some('*')) => {
                let start = line;
                chars.next();
                let mut prev = ' ';
                loop {
                    let Some(c) = chars.next() else {
                        return Err((start, "comment not closed by */".to_string()));
                    };
                    if c == '\n' {
                        line += 1;
                        out.push('\n');
                    }
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
                out.push(' ');
            }
            ('/', Some('/')) => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            _ => {
                if c == '\n' {
                    line += 1;
                }
                out.push(c);
            }
        }
    }
    Ok(out)
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim();
    match s.find(|c: char| c.is_whitespace()) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    }
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Rust keywords, which a field may not be named (the mirror would not compile).
const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "crate", "dyn", "enum", "extern", "fn", "gen", "impl", "in",
    "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "self", "super", "trait", "type",
    "unsafe", "use", "where",
];

/// `__u64 name[DIM][DIM];`
fn field(l: &str, defines: &[Define]) -> Result<Field, String> {
    let (ty, rest) = split_word(l);
    let scalar = match ty {
        "__u64" => Scalar::U64,
        "__u32" => Scalar::U32,
        _ => return Err(format!("field type {ty:?} is not __u64 or __u32")),
    };
    let decl = rest
        .strip_suffix(';')
        .ok_or("a field must be one declaration ending in `;`")?
        .trim();
    let (name, mut dims_text) = match decl.find('[') {
        Some(i) => (decl[..i].trim(), &decl[i..]),
        None => (decl, ""),
    };
    if !is_ident(name) {
        return Err(format!("{name:?} is not a field name (one field per line)"));
    }
    if RUST_KEYWORDS.contains(&name) {
        return Err(format!("field name {name} is a Rust keyword"));
    }
    let mut dims = Vec::new();
    while !dims_text.is_empty() {
        let inner = dims_text
            .strip_prefix('[')
            .and_then(|t| t.find(']').map(|j| (&t[..j], &t[j + 1..])));
        let Some((expr, rest)) = inner else {
            return Err(format!("cannot read the array dimensions {dims_text:?}"));
        };
        let n = eval(expr, defines)?;
        if n == 0 {
            return Err(format!("dimension [{expr}] is zero"));
        }
        dims.push(n);
        dims_text = rest.trim_start();
    }
    Ok(Field {
        name: name.to_string(),
        scalar,
        dims,
        line: 0,
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(i128),
    Name(String),
    Op(char),
}

fn tokens(expr: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if "+-*/()".contains(c) {
            out.push(Token::Op(c));
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &expr[start..i];
            if c.is_ascii_digit() {
                let n = match word.strip_prefix("0x").or_else(|| word.strip_prefix("0X")) {
                    Some(hex) => i128::from_str_radix(hex, 16),
                    None if word.len() > 1 && word.starts_with('0') => {
                        return Err(format!("octal literal {word} is not supported"));
                    }
                    None => word.parse(),
                };
                out.push(Token::Num(n.map_err(|_| {
                    format!("{word} is not a plain integer (no suffixes)")
                })?));
            } else {
                out.push(Token::Name(word.to_string()));
            }
        } else {
            return Err(format!("unsupported character {c:?} in {expr:?}"));
        }
    }
    Ok(out)
}

/// Evaluates `expr` with the defines seen so far.
pub fn eval(expr: &str, defines: &[Define]) -> Result<u64, String> {
    let toks = tokens(expr)?;
    let mut p = Eval {
        toks: &toks,
        at: 0,
        defines,
    };
    let v = p.sum()?;
    if let Some(t) = toks.get(p.at) {
        return Err(format!("unexpected {t:?} in {expr:?}"));
    }
    u64::try_from(v).map_err(|_| format!("{expr:?} is {v}, not a size or index"))
}

struct Eval<'a> {
    toks: &'a [Token],
    at: usize,
    defines: &'a [Define],
}

impl Eval<'_> {
    fn peek_op(&self) -> Option<char> {
        match self.toks.get(self.at) {
            Some(Token::Op(c)) => Some(*c),
            _ => None,
        }
    }

    fn sum(&mut self) -> Result<i128, String> {
        let mut v = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek_op() {
            self.at += 1;
            let r = self.product()?;
            v = if op == '+' {
                v.checked_add(r)
            } else {
                v.checked_sub(r)
            }
            .ok_or("overflow")?;
        }
        Ok(v)
    }

    fn product(&mut self) -> Result<i128, String> {
        let mut v = self.unary()?;
        while let Some(op @ ('*' | '/')) = self.peek_op() {
            self.at += 1;
            let r = self.unary()?;
            v = if op == '*' {
                v.checked_mul(r).ok_or("overflow")?
            } else if r == 0 {
                return Err("division by zero".to_string());
            } else {
                // C's integer division truncates toward zero, as Rust's does.
                v / r
            };
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<i128, String> {
        match self.toks.get(self.at).cloned() {
            Some(Token::Op('-')) => {
                self.at += 1;
                self.unary()?
                    .checked_neg()
                    .ok_or_else(|| "overflow".to_string())
            }
            Some(Token::Op('+')) => {
                self.at += 1;
                self.unary()
            }
            Some(Token::Op('(')) => {
                self.at += 1;
                let v = self.sum()?;
                if self.peek_op() != Some(')') {
                    return Err("missing `)`".to_string());
                }
                self.at += 1;
                Ok(v)
            }
            Some(Token::Num(n)) => {
                self.at += 1;
                Ok(n)
            }
            Some(Token::Name(name)) => {
                self.at += 1;
                self.defines
                    .iter()
                    .find(|d| d.name == name)
                    .map(|d| i128::from(d.value))
                    .ok_or_else(|| format!("{name} is not defined above"))
            }
            Some(t) => Err(format!("unexpected {t:?}")),
            None => Err("expression ends early".to_string()),
        }
    }
}

/// The Rust mirror: `pub const NAME: usize` per define, a `#[repr(C)]`
/// struct per struct, and compile-time checks that rustc lays each out in
/// the size and at the offsets computed here (which the C check ties to
/// clang's).
pub fn rust(h: &Header, source: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "// Generated by exporter/build.rs from {source}; do not edit.\n"
    );
    for d in &h.defines {
        let _ = writeln!(o, "/// `{}` (usescope.h line {}).", d.name, d.line);
        let _ = writeln!(o, "pub const {}: usize = {};", d.name, d.value);
    }
    for s in &h.structs {
        let rname = s.rust_name();
        let (offsets, size) = s.layout();
        let _ = writeln!(o, "\n/// `struct {}` (usescope.h line {}).", s.name, s.line);
        let _ = writeln!(o, "#[repr(C)]\npub struct {rname} {{");
        for f in &s.fields {
            let ty = f
                .dims
                .iter()
                .rev()
                .fold(f.scalar.rust().to_string(), |inner, n| {
                    format!("[{inner}; {n}]")
                });
            let _ = writeln!(o, "    pub {}: {ty},", f.name);
        }
        let _ = writeln!(o, "}}");
        let _ = writeln!(
            o,
            "const _: () = assert!(::std::mem::size_of::<{rname}>() == {size});"
        );
        for (f, at) in s.fields.iter().zip(offsets) {
            let _ = writeln!(
                o,
                "const _: () = assert!(::std::mem::offset_of!({rname}, {}) == {at});",
                f.name
            );
        }
    }
    o
}

/// C that includes the header and asserts every value and layout this
/// reading computed; compiled by the probes' clang, a misreading fails the build.
pub fn c_check(h: &Header, file: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "/* Generated by exporter/build.rs: its reading of {file}, checked by the compiler. */"
    );
    o.push_str("#include \"vmlinux.h\"\n#include \"usescope.h\"\n");
    for d in &h.defines {
        let _ = writeln!(
            o,
            "_Static_assert(({name}) == {v}ULL, \"{file}:{line}: build.rs reads {name} as {v}\");",
            name = d.name,
            v = d.value,
            line = d.line
        );
    }
    for s in &h.structs {
        let (offsets, size) = s.layout();
        let name = &s.name;
        let _ = writeln!(
            o,
            "_Static_assert(sizeof(struct {name}) == {size}, \"{file}:{}: build.rs lays out struct {name} in {size} bytes\");",
            s.line
        );
        for (f, at) in s.fields.iter().zip(offsets) {
            let fname = &f.name;
            let line = f.line;
            let _ = writeln!(
                o,
                "_Static_assert(__builtin_offsetof(struct {name}, {fname}) == {at}, \"{file}:{line}: build.rs puts {name}.{fname} at byte {at}\");"
            );
            // The size of the field and of each inner dimension's element:
            // catches a misread dimension or element type.
            for k in 0..=f.dims.len() {
                let bytes = f.size_from(k);
                let _ = writeln!(
                    o,
                    "_Static_assert(sizeof(((struct {name} *)0)->{fname}{idx}) == {bytes}, \"{file}:{line}: build.rs sizes {name}.{fname}{idx} at {bytes} bytes\");",
                    idx = "[0]".repeat(k)
                );
            }
        }
    }
    o
}
