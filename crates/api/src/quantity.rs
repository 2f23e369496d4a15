//! Kubernetes quantities (`resource.Quantity`: `64Mi`, `1G`, `500m`, `1e3`) as the API server
//! parses them, for the fields podlab reads as a number of bytes (`emptyDir.sizeLimit`).

/// The value of `text` in bytes, rounded up to a whole byte as `Quantity.Value()` does; None
/// when it is not a quantity. Negative quantities are returned as such (validation refuses them).
pub fn bytes(text: &str) -> Option<i128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number == "+" || number == "-" {
        return None;
    }
    let (negative, digits) = match number.as_bytes()[0] {
        b'-' => (true, &number[1..]),
        b'+' => (false, &number[1..]),
        _ => (false, number),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
        || whole.len() + fraction.len() > 30
    {
        return None;
    }
    // (multiplier numerator, denominator): binary suffixes, decimal SI suffixes, `eN`.
    let (numerator, denominator): (i128, i128) = match suffix {
        "" => (1, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        exponent => {
            let power: u32 = exponent
                .strip_prefix(['e', 'E'])?
                .parse::<i32>()
                .ok()
                .filter(|p| (0..=18).contains(p))? as u32;
            (10i128.pow(power), 1)
        }
    };
    let scale = 10i128.pow(fraction.len() as u32);
    let mantissa: i128 = format!("{whole}{fraction}").parse().ok()?;
    let numerator = mantissa.checked_mul(numerator)?;
    let denominator = denominator.checked_mul(scale)?;
    // Rounded up (away from zero), as Quantity.Value() rounds.
    let value = (numerator + denominator - 1) / denominator;
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn binary_decimal_and_exponent_suffixes() {
        assert_eq!(bytes("64Mi"), Some(64 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1.5Ki"), Some(1536));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(bytes("100"), Some(100));
        assert_eq!(bytes("500m"), Some(1), "a fraction of a byte rounds up");
        assert_eq!(bytes("-1Mi"), Some(-(1 << 20)));
    }

    #[test]
    fn not_quantities() {
        for bad in ["", "Mi", "12Q", "1..2", "abc", "1 Mi", "-"] {
            assert_eq!(bytes(bad), None, "{bad:?}");
        }
    }
}
