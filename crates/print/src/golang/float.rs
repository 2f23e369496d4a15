//! `strconv.FormatFloat` for the formats kubectl's output goes through ('e', 'f', 'g'), and the
//! float spelling of `encoding/json`.
//!
//! Rust and Go both produce the shortest decimal that round-trips and both round exactly when a
//! precision is given, so only the layout (exponent form, `e+06`, when to switch to exponent
//! form) has to be rebuilt here.

/// Decimal digits of `|f|` (no leading or trailing zeros, at least one digit) and the position
/// of the decimal point: the value is `0.d1d2... * 10^dp`.
struct Digits {
    digits: Vec<u8>,
    dp: i32,
}

/// Shortest round-trip digits (`prec == None`) or `prec` significant digits, correctly rounded.
fn digits(f: f64, significant: Option<usize>) -> Digits {
    let text = match significant {
        None => format!("{:e}", f.abs()),
        Some(0) => format!("{:.0e}", f.abs()),
        Some(n) => format!("{:.*e}", n - 1, f.abs()),
    };
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let mut digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    if digits.iter().all(|d| *d == b'0') {
        return Digits {
            digits: vec![b'0'],
            dp: 1,
        };
    }
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    Digits {
        digits,
        dp: exponent + 1,
    }
}

fn special(f: f64) -> Option<String> {
    if f.is_nan() {
        Some("NaN".into())
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" }.into())
    } else {
        None
    }
}

/// `strconv.FormatFloat(f, verb, prec, 64)` for verb in `e E f F g G`; `prec < 0` means shortest.
pub(crate) fn format_float(f: f64, verb: char, prec: i32) -> String {
    if let Some(s) = special(f) {
        return s;
    }
    let neg = f.is_sign_negative();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    let shortest = prec < 0;
    match verb {
        'b' => out.push_str(&fmt_b(f)),
        'x' | 'X' => out.push_str(&fmt_x(f, prec, verb)),
        'e' | 'E' => {
            let d = digits(
                f,
                if shortest {
                    None
                } else {
                    Some(prec as usize + 1)
                },
            );
            let prec = if shortest {
                d.digits.len() as i32 - 1
            } else {
                prec
            };
            out.push_str(&fmt_e(&d, prec, verb));
        }
        'f' | 'F' => {
            if shortest {
                let d = digits(f, None);
                let prec = (d.digits.len() as i32 - d.dp).max(0);
                out.push_str(&fmt_f(&d, prec));
            } else {
                let text = format!("{:.*}", prec as usize, f.abs());
                out.push_str(&text);
            }
        }
        _ => {
            // 'g' / 'G'
            let d = if shortest {
                digits(f, None)
            } else {
                digits(f, Some(prec.max(1) as usize))
            };
            let mut eprec = if shortest { 6 } else { prec.max(1) };
            if !shortest && eprec > d.digits.len() as i32 && d.digits.len() as i32 >= d.dp {
                eprec = d.digits.len() as i32;
            }
            let exp = d.dp - 1;
            let e = if verb == 'G' { 'E' } else { 'e' };
            if exp < -4 || exp >= eprec {
                out.push_str(&fmt_e(&d, d.digits.len() as i32 - 1, e));
            } else {
                out.push_str(&fmt_f(&d, (d.digits.len() as i32 - d.dp).max(0)));
            }
        }
    }
    out
}

/// Mantissa and unbiased binary exponent of a finite float, as strconv splits it.
fn mantissa_exponent(f: f64) -> (u64, i32) {
    let bits = f.to_bits();
    let mut exp = ((bits >> 52) & 0x7ff) as i32;
    let mut mant = bits & ((1u64 << 52) - 1);
    if exp == 0 {
        exp += 1;
    } else {
        mant |= 1u64 << 52;
    }
    (mant, exp - 1023)
}

/// `%b`: decimal mantissa, binary exponent (`7881299347898368p-51`).
fn fmt_b(f: f64) -> String {
    let (mant, exp) = mantissa_exponent(f);
    let e = exp - 52;
    format!(
        "{mant}p{}{}",
        if e >= 0 { "+" } else { "-" },
        e.unsigned_abs()
    )
}

/// `%x`: hexadecimal mantissa and binary exponent (`0x1.cp+01`).
fn fmt_x(f: f64, prec: i32, verb: char) -> String {
    let (mut mant, mut exp) = mantissa_exponent(f);
    if mant == 0 {
        exp = 0;
    }
    mant <<= 60 - 52;
    while mant != 0 && mant & (1 << 60) == 0 {
        mant <<= 1;
        exp -= 1;
    }
    if (0..15).contains(&prec) {
        let shift = (prec * 4) as u32;
        let extra = (mant << shift) & ((1u64 << 60) - 1);
        mant >>= 60 - shift;
        if extra | (mant & 1) > 1 << 59 {
            mant += 1;
        }
        mant <<= 60 - shift;
        if mant & (1 << 61) != 0 {
            mant >>= 1;
            exp += 1;
        }
    }
    let hex: &[u8] = if verb == 'X' {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut s = String::from("0");
    s.push(verb);
    s.push((b'0' + ((mant >> 60) & 1) as u8) as char);
    mant <<= 4;
    if prec < 0 && mant != 0 {
        s.push('.');
        while mant != 0 {
            s.push(hex[((mant >> 60) & 15) as usize] as char);
            mant <<= 4;
        }
    } else if prec > 0 {
        s.push('.');
        for _ in 0..prec {
            s.push(hex[((mant >> 60) & 15) as usize] as char);
            mant <<= 4;
        }
    }
    s.push(if verb == 'X' { 'P' } else { 'p' });
    s.push(if exp < 0 { '-' } else { '+' });
    let e = exp.unsigned_abs();
    if e < 10 {
        s.push('0');
    }
    s.push_str(&e.to_string());
    s
}

/// d.ddddde±dd with `prec` digits after the point.
fn fmt_e(d: &Digits, prec: i32, e: char) -> String {
    let mut s = String::new();
    s.push(d.digits[0] as char);
    if prec > 0 {
        s.push('.');
        for i in 1..=prec as usize {
            s.push(*d.digits.get(i).unwrap_or(&b'0') as char);
        }
    }
    let exp = if d.digits == [b'0'] { 0 } else { d.dp - 1 };
    s.push(e);
    s.push(if exp < 0 { '-' } else { '+' });
    let abs = exp.unsigned_abs();
    if abs < 10 {
        s.push('0');
    }
    s.push_str(&abs.to_string());
    s
}

/// ddd.ddd with `prec` digits after the point, from digits already rounded to fit.
fn fmt_f(d: &Digits, prec: i32) -> String {
    let mut s = String::new();
    if d.dp > 0 {
        for i in 0..d.dp as usize {
            s.push(*d.digits.get(i).unwrap_or(&b'0') as char);
        }
    } else {
        s.push('0');
    }
    if prec > 0 {
        s.push('.');
        for i in 0..prec {
            let idx = d.dp + i;
            let c = if idx < 0 {
                b'0'
            } else {
                *d.digits.get(idx as usize).unwrap_or(&b'0')
            };
            s.push(c as char);
        }
    }
    s
}

/// How `encoding/json` writes a float64: `%f` shortest between 1e-6 and 1e21, otherwise `%e`
/// with a one-digit negative exponent (`1e-7`, but `1e+21`).
pub(crate) fn json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format_float(f, 'e', -1);
        if let Some(pos) = s.find("e-0") {
            let mut t = s[..pos].to_string();
            t.push_str("e-");
            t.push_str(&s[pos + 3..]);
            return t;
        }
        s
    } else {
        format_float(f, 'f', -1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_g_matches_go() {
        assert_eq!(format_float(3.0, 'g', -1), "3");
        assert_eq!(format_float(0.5, 'g', -1), "0.5");
        assert_eq!(format_float(1e21, 'g', -1), "1e+21");
        assert_eq!(format_float(1.5e-7, 'g', -1), "1.5e-07");
        assert_eq!(format_float(1234567.0, 'g', -1), "1.234567e+06");
        assert_eq!(format_float(123456.0, 'g', -1), "123456");
        assert_eq!(format_float(0.0001, 'g', -1), "0.0001");
        assert_eq!(format_float(0.00001, 'g', -1), "1e-05");
        assert_eq!(format_float(-2.5, 'g', -1), "-2.5");
        assert_eq!(format_float(0.0, 'g', -1), "0");
        assert_eq!(
            format_float(12345678901234567890.0, 'g', -1),
            "1.2345678901234567e+19"
        );
    }

    #[test]
    fn fixed_precision_matches_go() {
        assert_eq!(format_float(1.23456, 'f', 2), "1.23");
        assert_eq!(format_float(0.5, 'e', 6), "5.000000e-01");
        assert_eq!(format_float(12345.678, 'e', 6), "1.234568e+04");
        assert_eq!(format_float(0.000012, 'E', 6), "1.200000E-05");
        assert_eq!(format_float(1e21, 'G', -1), "1E+21");
        assert_eq!(format_float(1.5, 'g', 5), "1.5");
        assert_eq!(format_float(123456.0, 'g', 3), "1.23e+05");
        assert_eq!(format_float(-3.5, 'f', 3), "-3.500");
        assert_eq!(format_float(3.5, 'x', -1), "0x1.cp+01");
        assert_eq!(format_float(3.5, 'b', -1), "7881299347898368p-51");
    }

    #[test]
    fn json_floats_match_go() {
        assert_eq!(json_float(3.0), "3");
        assert_eq!(json_float(1e21), "1e+21");
        assert_eq!(json_float(1.5e-7), "1.5e-7");
        assert_eq!(json_float(12345678901234567890.0), "12345678901234567000");
        assert_eq!(json_float(0.5), "0.5");
    }
}
