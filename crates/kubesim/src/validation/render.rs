//! Go's formatting of values inside validation messages.
//!
//! `field.Error.ErrorBody` prints strings with `%q`, numbers and booleans with `%v` and
//! anything else with `json.Marshal`; kube-openapi prints schema bounds (always `float64`)
//! with `%v`. Matching these byte for byte keeps kubesim's messages identical to a cluster's.

use serde_json::{Number, Value};

/// A bad value as `field.Error.ErrorBody` renders it.
pub(crate) fn bad_value(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Number(n) => go_number_v(n),
        Value::Bool(b) => b.to_string(),
        Value::Null | Value::Array(_) | Value::Object(_) => go_json(value),
    }
}

/// Go's `strconv.Quote`: double quotes, backslash escapes, printable characters kept.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
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
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() && (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\U{:08x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number printed with Go's `%v`: integers as is, floats in `%g` shortest form.
pub(crate) fn go_number_v(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    n.as_f64().map(go_float_v).unwrap_or_else(|| n.to_string())
}

/// Go's `%v` for a `float64`: `strconv.FormatFloat(f, 'g', -1, 64)`, where the exponent form
/// is used below 1e-4 and from 1e+06 up (`1e+06`, `1.5e-05`).
pub(crate) fn go_float_v(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let (negative, digits, exp) = shortest_digits(f);
    let sign = if negative { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let mantissa = with_point(&digits, 1);
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs());
    }
    format!("{sign}{}", fixed(&digits, exp))
}

/// Go's `encoding/json` rendering of a float: fixed notation between 1e-6 and 1e21.
fn go_json_float(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return "0".to_string();
    }
    let (negative, digits, exp) = shortest_digits(f);
    let sign = if negative { "-" } else { "" };
    if !(-7..21).contains(&exp) {
        let mantissa = with_point(&digits, 1);
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{exp_sign}{}", exp.abs());
    }
    format!("{sign}{}", fixed(&digits, exp))
}

/// The shortest round-trip decimal digits of `f` and its decimal exponent (`d.ddd × 10^exp`).
fn shortest_digits(f: f64) -> (bool, String, i32) {
    let formatted = format!("{:e}", f.abs());
    let (mantissa, exp) = formatted.split_once('e').unwrap_or((formatted.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    (f < 0.0, digits, exp.parse().unwrap_or(0))
}

/// Digits with a decimal point after `int_len` of them, trailing point dropped.
fn with_point(digits: &str, int_len: usize) -> String {
    if digits.len() <= int_len {
        return digits.to_string();
    }
    format!("{}.{}", &digits[..int_len], &digits[int_len..])
}

/// Digits placed at decimal exponent `exp` in plain fixed notation.
fn fixed(digits: &str, exp: i32) -> String {
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        return format!("0.{zeros}{digits}");
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        return format!("{digits}{}", "0".repeat(int_len - digits.len()));
    }
    with_point(digits, int_len)
}

/// Go's `json.Marshal` of a decoded JSON value: object keys sorted, `<`, `>` and `&`
/// escaped as Go's HTML-safe encoder does.
pub(crate) fn go_json(value: &Value) -> String {
    let mut out = String::new();
    write_json(value, &mut out);
    out
}

fn write_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_i64() || n.is_u64() => out.push_str(&n.to_string()),
        Value::Number(n) => out.push_str(&n.as_f64().map(go_json_float).unwrap_or_else(|| n.to_string())),
        Value::String(s) => write_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(key, out);
                out.push(':');
                write_json(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_quoted_like_go_strconv_quote() {
        assert_eq!(go_quote("a b"), r#""a b""#);
        assert_eq!(go_quote("say \"hi\"\n"), r#""say \"hi\"\n""#);
        assert_eq!(go_quote("\u{1}é"), r#""\x01é""#);
    }

    #[test]
    fn floats_use_go_percent_v_forms() {
        assert_eq!(go_float_v(1.0), "1");
        assert_eq!(go_float_v(1.5), "1.5");
        assert_eq!(go_float_v(100000.0), "100000");
        assert_eq!(go_float_v(1_000_000.0), "1e+06");
        assert_eq!(go_float_v(0.0001), "0.0001");
        assert_eq!(go_float_v(0.00001), "1e-05");
        assert_eq!(go_float_v(-2.25), "-2.25");
    }

    #[test]
    fn complex_values_render_as_sorted_json() {
        let value = json!({"b": [1, 2.5], "a": "<x>", "c": null});
        assert_eq!(bad_value(&value), r#"{"a":"\u003cx\u003e","b":[1,2.5],"c":null}"#);
        assert_eq!(bad_value(&Value::Null), "null");
    }

    #[test]
    fn json_floats_stay_fixed_below_1e21() {
        assert_eq!(go_json(&json!(1e20)), "100000000000000000000");
        assert_eq!(go_json(&json!(1e21)), "1e+21");
    }
}
