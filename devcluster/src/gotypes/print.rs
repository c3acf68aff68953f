//! Go's `fmt` verbs on JSON values decoded into `interface{}`, as
//! kube-apiserver's messages print them.

use serde_json::{Number, Value};

/// How a Go decoder held the numbers of a JSON value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Numbers {
    /// `int64` for an integer literal that fits, `float64` otherwise: what
    /// `k8s.io/apimachinery/pkg/util/json` decodes a patch into, and what
    /// the unstructured form of a stored object holds.
    PreserveInts,
    /// `float64` for every number: what `encoding/json` decodes an apply
    /// body into (after YAML became JSON).
    Floats,
}

/// A JSON number once Go holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum GoNumber {
    Int64(i64),
    Float64(f64),
}

impl Numbers {
    /// How Go holds `number`.
    pub(crate) fn of(self, number: &Number) -> GoNumber {
        match (self, number.as_i64()) {
            (Self::PreserveInts, Some(int)) => GoNumber::Int64(int),
            _ => GoNumber::Float64(number.as_f64().unwrap_or_default()),
        }
    }
}

impl GoNumber {
    /// Go's `%v`.
    fn plain(self) -> String {
        match self {
            Self::Int64(int) => int.to_string(),
            Self::Float64(float) => format_float(float),
        }
    }

    /// The Go type's name (`%T`).
    pub(crate) fn type_name(self) -> &'static str {
        match self {
            Self::Int64(_) => "int64",
            Self::Float64(_) => "float64",
        }
    }
}

/// `%v`: `map[a:1 b:[x y]]`, maps in key order, `<nil>` for null.
pub(crate) fn plain(value: &Value, numbers: Numbers) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => numbers.of(n).plain(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| plain(v, numbers)).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(key, _)| *key);
            let entries: Vec<String> = entries
                .into_iter()
                .map(|(key, v)| format!("{key}:{}", plain(v, numbers)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// `%#v` of an `interface{}`: `map[string]interface {}{"a":1}`,
/// `[]interface {}{1, "a"}`, `"x"`, `interface {}(nil)`.
pub(crate) fn go_syntax(value: &Value, numbers: Numbers) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::String(s) => quote(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| go_syntax(v, numbers)).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(key, _)| *key);
            let entries: Vec<String> = entries
                .into_iter()
                .map(|(key, v)| format!("{}:{}", quote(key), go_syntax(v, numbers)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", entries.join(", "))
        }
        Value::Bool(_) | Value::Number(_) => plain(value, numbers),
    }
}

/// `%T` of an `interface{}` holding `value`.
pub(crate) fn type_name(value: &Value, numbers: Numbers) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) => numbers.of(n).type_name(),
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// `strconv.FormatFloat(f, 'g', -1, 64)`, Go's `%v` of a `float64`: the
/// shortest digits, in exponent form below 1e-4 and from 1e+06 on.
pub(crate) fn format_float(float: f64) -> String {
    if float == 0.0 {
        return if float.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let scientific = format!("{float:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or_default();
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let len = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{fraction}e{exp_sign}{:02}",
            exponent.unsigned_abs()
        );
    }
    // The decimal point comes after `point` digits.
    let point = exponent + 1;
    let text = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point >= len {
        format!("{digits}{}", "0".repeat((point - len) as usize))
    } else {
        let (whole, fraction) = digits.split_at(point as usize);
        format!("{whole}.{fraction}")
    };
    format!("{sign}{text}")
}

/// `strconv.Quote`: double quotes, Go's escapes.
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn floats_print_as_go_prints_them() {
        for (float, go) in [
            (1.5, "1.5"),
            (3.0, "3"),
            (100_000.0, "100000"),
            (1e6, "1e+06"),
            (1_234_567.0, "1.234567e+06"),
            (3e9, "3e+09"),
            (1e20, "1e+20"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (0.25, "0.25"),
        ] {
            assert_eq!(format_float(float), go, "{float}");
        }
    }

    #[test]
    fn a_patch_prints_as_go_prints_a_map() {
        let patch = json!({"spec": {"b": [1, "x", null], "a": 1.5, "c": true}});
        assert_eq!(
            plain(&patch, Numbers::PreserveInts),
            "map[spec:map[a:1.5 b:[1 x <nil>] c:true]]"
        );
        assert_eq!(plain(&json!(3_000_000_000_u64), Numbers::Floats), "3e+09");
        assert_eq!(
            plain(&json!(3_000_000_000_u64), Numbers::PreserveInts),
            "3000000000"
        );
    }

    #[test]
    fn go_syntax_names_the_interface_types() {
        assert_eq!(
            go_syntax(&json!({"x": 1, "a": [1, "a"]}), Numbers::Floats),
            "map[string]interface {}{\"a\":[]interface {}{1, \"a\"}, \"x\":1}"
        );
        assert_eq!(
            go_syntax(&json!("a\"b\n"), Numbers::Floats),
            "\"a\\\"b\\n\""
        );
        assert_eq!(
            type_name(&json!({}), Numbers::Floats),
            "map[string]interface {}"
        );
        assert_eq!(type_name(&json!(1), Numbers::PreserveInts), "int64");
    }
}
