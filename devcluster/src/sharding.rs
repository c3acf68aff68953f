//! The `shardSelector` of lists and watches (KEP-5866, feature gate
//! `ShardedListAndWatch`): `shardRange(object.metadata.uid, '0x…', '0x…')`
//! calls joined with `||`, each selecting the objects whose field's 64-bit
//! FNV-1a hash lies in `[start, end)`.
//!
//! kube-apiserver parses the expression as CEL and walks its syntax tree;
//! the only trees it accepts are `||` chains of `shardRange` calls, so this
//! parser reads exactly that grammar and words each refusal as
//! kube-apiserver does. Only the CEL syntax errors (an unclosed call, a stray
//! character) are worded by this parser, not cel-go's.

use crate::object::Meta;

/// The two fields a range may hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Uid,
    Namespace,
}

impl Field {
    fn path(self) -> &'static str {
        match self {
            Self::Uid => "object.metadata.uid",
            Self::Namespace => "object.metadata.namespace",
        }
    }

    fn value(self, meta: &Meta) -> &str {
        match self {
            Self::Uid => &meta.uid,
            Self::Namespace => &meta.namespace,
        }
    }
}

/// One `shardRange(field, start, end)`: the bounds as written (validated,
/// so canonical) and as numbers (`end` may be 2^64).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    start: (String, u128),
    end: (String, u128),
}

/// A parsed shard selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardSelector {
    field: Field,
    ranges: Vec<Range>,
}

impl ShardSelector {
    /// Parses `expr`; the error is kube-apiserver's message after its
    /// `invalid shard selector: ` prefix.
    pub(crate) fn parse(expr: &str) -> Result<Self, String> {
        let expr = expr.trim();
        if expr.is_empty() {
            return Err(
                "empty shard selector is not allowed; omit the parameter for unfiltered lists"
                    .into(),
            );
        }
        let tree = Parser::new(expr).whole()?;
        let mut calls = Vec::new();
        walk(&tree, &mut calls)?;
        let mut ranges = Vec::with_capacity(calls.len());
        let mut field = None;
        for (f, range) in calls {
            match field {
                None => field = Some(f),
                Some(first) if first != f => {
                    return Err(format!(
                        "all shard ranges must use the same field, got {:?} and {:?}",
                        first.path(),
                        f.path()
                    ));
                }
                Some(_) => {}
            }
            ranges.push(range);
        }
        Ok(Self {
            field: field.unwrap_or(Field::Uid),
            ranges,
        })
    }

    /// Whether the object's hashed field lies in one of the ranges.
    pub(crate) fn matches(&self, meta: &Meta) -> bool {
        let hash = u128::from(fnv1a_64(self.field.value(meta).as_bytes()));
        self.ranges
            .iter()
            .any(|r| r.start.1 <= hash && hash < r.end.1)
    }

    /// The canonical text kube-apiserver echoes in a list's
    /// `metadata.shardInfo.selector`.
    pub(crate) fn canonical(&self) -> String {
        self.ranges
            .iter()
            .map(|r| {
                format!(
                    "shardRange({}, '{}', '{}')",
                    self.field.path(),
                    r.start.0,
                    r.end.0
                )
            })
            .collect::<Vec<_>>()
            .join(" || ")
    }
}

/// 64-bit FNV-1a, as Go's `hash/fnv` computes it.
pub(crate) fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// The expression's tree, as far as the accepted grammar needs it.
#[derive(Debug)]
enum Expr {
    Or(Box<Expr>, Box<Expr>),
    /// `&&`, which kube-apiserver refuses whatever its operands.
    And,
    Call(String, Vec<Expr>),
    Path(String),
    Literal(Literal),
}

#[derive(Debug)]
enum Literal {
    String(String),
    Int,
}

/// Collects the `shardRange` calls of an `||` chain, as kube-apiserver's
/// walk of the CEL tree does (left first).
fn walk(expr: &Expr, out: &mut Vec<(Field, Range)>) -> Result<(), String> {
    match expr {
        Expr::Or(left, right) => {
            walk(left, out)?;
            walk(right, out)
        }
        Expr::And => Err(unsupported_function("_&&_")),
        Expr::Call(name, args) if name == "shardRange" => {
            out.push(shard_range(args)?);
            Ok(())
        }
        Expr::Call(name, _) => Err(unsupported_function(name)),
        Expr::Path(_) | Expr::Literal(_) => Err(format!(
            "unexpected expression kind {}; expected shardRange() call or || operator",
            kind(expr)
        )),
    }
}

fn unsupported_function(name: &str) -> String {
    format!("unsupported function {name:?}; only shardRange() and || are allowed")
}

/// cel-go's `ast.ExprKind` as Go prints it (`%v` of the enum: its number;
/// an operator is a call).
fn kind(expr: &Expr) -> u8 {
    match expr {
        Expr::Or(..) | Expr::And | Expr::Call(..) => 1,
        Expr::Path(path) if path.contains('.') => 7,
        Expr::Path(_) => 3,
        Expr::Literal(_) => 5,
    }
}

fn shard_range(args: &[Expr]) -> Result<(Field, Range), String> {
    let [field, start, end] = args else {
        return Err(format!(
            "shardRange() requires exactly 3 arguments, got {}",
            args.len()
        ));
    };
    let Expr::Path(path) = field else {
        return Err(format!(
            "shardRange() first argument: expected field path (e.g. object.metadata.uid), got expression kind {}",
            kind(field)
        ));
    };
    let field = match path.as_str() {
        "object.metadata.uid" => Field::Uid,
        "object.metadata.namespace" => Field::Namespace,
        other => {
            return Err(format!(
                "unsupported field path {other:?}; supported: object.metadata.uid, object.metadata.namespace"
            ));
        }
    };
    let start = bound(start, "hexStart")?;
    let end = bound(end, "hexEnd")?;
    if start.1 >= end.1 {
        return Err(format!(
            "shard range start {} must be less than end {}",
            start.0, end.0
        ));
    }
    Ok((field, Range { start, end }))
}

/// 2^64 as kube-apiserver accepts it: the one 17-digit bound.
const TWO_TO_THE_64: &str = "0x10000000000000000";

/// A bound: a string literal `0x` and 16 lowercase hex digits, or 2^64.
fn bound(expr: &Expr, name: &str) -> Result<(String, u128), String> {
    let text = match expr {
        Expr::Literal(Literal::String(s)) => s,
        Expr::Literal(Literal::Int) => {
            return Err(format!("{name} must be a string literal, got int64"));
        }
        other => {
            return Err(format!(
                "{name} must be a string literal (e.g. '0xff'), got expression kind {}",
                kind(other)
            ));
        }
    };
    let Some(hex) = text.strip_prefix("0x") else {
        return Err(format!("{name} must have '0x' prefix, got {text:?}"));
    };
    if hex.is_empty() {
        return Err(format!("{name}: hex value is required after '0x'"));
    }
    let digits = hex.len();
    if digits > 17 {
        return Err(format!(
            "{name}: hex value too long ({digits} chars, max 17): {hex:?}"
        ));
    }
    if let Some(c) = hex
        .chars()
        .find(|c| !c.is_ascii_digit() && !('a'..='f').contains(c))
    {
        return Err(format!(
            "{name}: invalid hex character {:?} in {text:?}",
            c.to_string()
        ));
    }
    if digits == 17 && text != TWO_TO_THE_64 {
        return Err(format!(
            "{name}: 17-digit hex value must be '{TWO_TO_THE_64}' (2^64), got {text:?}"
        ));
    }
    if digits < 16 {
        let padded = format!("0x{}{hex}", "0".repeat(16 - digits));
        return Err(format!(
            "{name} must be a 0x-prefixed 16-digit hex value, got {text:?} (did you mean {padded:?}?)"
        ));
    }
    let value = u128::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
    Ok((text.clone(), value))
}

/// A recursive-descent reader of the CEL subset: `||` over `&&` over
/// primaries (a call, a dotted path, a string or integer literal, or a
/// parenthesised expression).
struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self { text, at: 0 }
    }

    fn whole(mut self) -> Result<Expr, String> {
        let expr = self.or()?;
        self.skip_space();
        match self.rest().chars().next() {
            None => Ok(expr),
            Some(c) => Err(self.syntax(&format!("unexpected {c:?}"))),
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let trimmed = self.rest().trim_start();
        self.at = self.text.len() - trimmed.len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn syntax(&self, what: &str) -> String {
        format!("CEL parse error: {what} at offset {}", self.at)
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.eat("||") {
            let right = self.and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.primary()?;
        while self.eat("&&") {
            self.primary()?;
            left = Expr::And;
        }
        Ok(left)
    }

    fn primary(&mut self) -> Result<Expr, String> {
        self.skip_space();
        let rest = self.rest();
        match rest.chars().next() {
            Some('(') => {
                self.at += 1;
                let inner = self.or()?;
                if !self.eat(")") {
                    return Err(self.syntax("expected ')'"));
                }
                Ok(inner)
            }
            Some(quote @ ('\'' | '"')) => {
                let body = &rest[1..];
                let Some(end) = body.find(quote) else {
                    return Err(self.syntax("unterminated string"));
                };
                self.at += end + 2;
                Ok(Expr::Literal(Literal::String(body[..end].to_owned())))
            }
            Some(c) if c.is_ascii_digit() => {
                let digits = rest
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(rest.len());
                self.at += digits;
                Ok(Expr::Literal(Literal::Int))
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => self.path_or_call(),
            Some(c) => Err(self.syntax(&format!("unexpected {c:?}"))),
            None => Err(self.syntax("unexpected end of input")),
        }
    }

    fn identifier(&mut self) -> Option<&'a str> {
        self.skip_space();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        (len > 0 && !rest.starts_with(|c: char| c.is_ascii_digit())).then(|| {
            self.at += len;
            &rest[..len]
        })
    }

    fn path_or_call(&mut self) -> Result<Expr, String> {
        let mut path = self
            .identifier()
            .ok_or_else(|| self.syntax("expected an identifier"))?
            .to_owned();
        while self.eat(".") {
            let field = self
                .identifier()
                .ok_or_else(|| self.syntax("expected a field name"))?;
            path.push('.');
            path.push_str(field);
        }
        if !self.eat("(") {
            return Ok(Expr::Path(path));
        }
        let mut args = Vec::new();
        if !self.eat(")") {
            loop {
                args.push(self.or()?);
                if self.eat(")") {
                    break;
                }
                if !self.eat(",") {
                    return Err(self.syntax("expected ',' or ')'"));
                }
            }
        }
        Ok(Expr::Call(path, args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: &str = "0x8000000000000000";
    const ZERO: &str = "0x0000000000000000";

    fn meta(uid: &str, namespace: &str) -> Meta {
        Meta {
            uid: uid.into(),
            namespace: namespace.into(),
            ..Meta::default()
        }
    }

    #[test]
    fn fnv1a_agrees_with_go() {
        // Go: fmt.Sprintf("%016x", fnv.New64a().Sum64()) of "" and "a".
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn two_halves_split_every_uid_once() {
        let low = ShardSelector::parse(&format!(
            "shardRange(object.metadata.uid, '{ZERO}', '{HALF}')"
        ))
        .unwrap();
        let high = ShardSelector::parse(&format!(
            "shardRange(object.metadata.uid, '{HALF}', '{TWO_TO_THE_64}')"
        ))
        .unwrap();
        let mut lows = 0;
        // Uids are random (RFC 4122 version 4): FNV-1a spreads those evenly,
        // though not strings that differ in their last bytes only.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for i in 0..200 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let m = meta(&format!("{seed:016x}-{i}"), "ns");
            assert_ne!(low.matches(&m), high.matches(&m), "{}", m.uid);
            lows += usize::from(low.matches(&m));
            let hash = fnv1a_64(m.uid.as_bytes());
            assert_eq!(low.matches(&m), hash < 1 << 63);
        }
        assert!((60..140).contains(&lows), "{lows} of 200 in the low half");
    }

    #[test]
    fn ranges_join_with_or_and_echo_canonically() {
        let text = format!(
            "shardRange(object.metadata.namespace,'{ZERO}','0x4000000000000000')||( shardRange(object.metadata.namespace, \"{HALF}\", '{TWO_TO_THE_64}'))"
        );
        let s = ShardSelector::parse(&text).unwrap();
        assert_eq!(
            s.canonical(),
            format!(
                "shardRange(object.metadata.namespace, '{ZERO}', '0x4000000000000000') || shardRange(object.metadata.namespace, '{HALF}', '{TWO_TO_THE_64}')"
            )
        );
        let h = fnv1a_64(b"team-a");
        let inside = !(0x4000_0000_0000_0000..1 << 63).contains(&h);
        assert_eq!(s.matches(&meta("x", "team-a")), inside);
    }

    #[test]
    fn refusals_are_worded_as_kube_apiserver_words_them() {
        let cases = [
            (
                "  ",
                "empty shard selector is not allowed; omit the parameter for unfiltered lists",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
                "hexStart must be a 0x-prefixed 16-digit hex value, got \"0x0\" (did you mean \"0x0000000000000000\"?)",
            ),
            (
                "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
                "unsupported field path \"object.metadata.name\"; supported: object.metadata.uid, object.metadata.namespace",
            ),
            (
                "shardRange(object.metadata.uid, '0x8000000000000000')",
                "shardRange() requires exactly 3 arguments, got 2",
            ),
            (
                "shardRange(object.metadata.uid, 'ff', '0x8000000000000000')",
                "hexStart must have '0x' prefix, got \"ff\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x', '0x8000000000000000')",
                "hexStart: hex value is required after '0x'",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x800000000000000G')",
                "hexEnd: invalid hex character \"G\" in \"0x800000000000000G\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x20000000000000000')",
                "hexEnd: 17-digit hex value must be '0x10000000000000000' (2^64), got \"0x20000000000000000\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x100000000000000000')",
                "hexEnd: hex value too long (18 chars, max 17): \"100000000000000000\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
                "shard range start 0x8000000000000000 must be less than end 0x8000000000000000",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')",
                "all shard ranges must use the same field, got \"object.metadata.uid\" and \"object.metadata.namespace\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
                "unsupported function \"_&&_\"; only shardRange() and || are allowed",
            ),
            (
                "hashRange(object.metadata.uid)",
                "unsupported function \"hashRange\"; only shardRange() and || are allowed",
            ),
        ];
        for (expr, message) in cases {
            assert_eq!(ShardSelector::parse(expr).unwrap_err(), message, "{expr}");
        }
        assert!(
            ShardSelector::parse("shardRange(object.metadata.uid")
                .unwrap_err()
                .starts_with("CEL parse error: ")
        );
    }
}
