//! Kubernetes quantities (`resource.Quantity`: `64Mi`, `1G`, `500m`, `1e3`) as the API server
//! parses them: a number of bytes (`emptyDir.sizeLimit`, memory), of milli-CPUs (cpu), compared
//! exactly ([`Amount`]).

/// The API server's message for a quantity that does not parse.
pub const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// A quantity in nano-units (so `100m` of CPU is 100_000_000 and `1Ki` of memory is
/// 1024_000_000_000): exact for every suffix Kubernetes has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Amount(i128);

impl Amount {
    pub const ZERO: Amount = Amount(0);

    /// Parses `resource.Quantity` text: a decimal number, then a binary suffix (`Ki`..`Ei`), a
    /// decimal one (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`) or an exponent (`e3`).
    pub fn parse(text: &str) -> Result<Amount, &'static str> {
        let number_end = text
            .char_indices()
            .find(|(i, c)| {
                !(c.is_ascii_digit() || *c == '.' || (*i == 0 && (*c == '+' || *c == '-')))
            })
            .map_or(text.len(), |(i, _)| i);
        let (number, suffix) = text.split_at(number_end);
        let (negative, digits) = match number.as_bytes().first() {
            Some(b'-') => (true, &number[1..]),
            Some(b'+') => (false, &number[1..]),
            _ => (false, number),
        };
        if digits.is_empty() || digits.matches('.').count() > 1 || digits == "." {
            return Err(QUANTITY_FORMAT);
        }
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        // value = digits * 10^-len(fraction), kept in nano-units below.
        let mut mantissa: i128 = 0;
        for c in whole.chars().chain(fraction.chars()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(c as u8 - b'0')))
                .ok_or(QUANTITY_FORMAT)?;
        }
        let (multiplier, decimal_exponent): (i128, i32) = match suffix {
            "" => (1, 0),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            exponent if exponent.starts_with(['e', 'E']) && exponent.len() > 1 => {
                let value: i32 = exponent[1..].parse().map_err(|_| QUANTITY_FORMAT)?;
                (1, value)
            }
            _ => return Err(QUANTITY_FORMAT),
        };
        // nano-units: mantissa * multiplier * 10^(decimal_exponent + 9 - len(fraction)).
        let shift = decimal_exponent + 9 - fraction.len() as i32;
        let mut nanos = mantissa.checked_mul(multiplier).ok_or(QUANTITY_FORMAT)?;
        if shift >= 0 {
            nanos = 10i128
                .checked_pow(shift as u32)
                .and_then(|p| nanos.checked_mul(p))
                .ok_or(QUANTITY_FORMAT)?;
        } else {
            // Finer than a nano-unit: rounded up, as Quantity rounds to its scale.
            let p = 10i128.checked_pow((-shift) as u32).ok_or(QUANTITY_FORMAT)?;
            nanos = (nanos + p - 1) / p;
        }
        Ok(Amount(if negative { -nanos } else { nanos }))
    }

    /// `Quantity.MilliValue()`: thousandths, rounded up.
    pub fn milli(self) -> i64 {
        ceil_div(self.0, 1_000_000) as i64
    }

    /// `Quantity.Value()`: whole units, rounded up.
    pub fn value(self) -> i64 {
        ceil_div(self.0, 1_000_000_000) as i64
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    if a >= 0 {
        (a + b - 1) / b
    } else {
        a / b
    }
}

impl std::ops::Add for Amount {
    type Output = Amount;
    fn add(self, other: Amount) -> Amount {
        Amount(self.0.saturating_add(other.0))
    }
}

/// `Quantity.String()`: the canonical form the API server stores and kubectl prints
/// (`0.5` → `500m`, `1000` → `1k`, `1024Mi` → `1Gi`, `1.5Gi` → `1536Mi`, `129e6` kept); None
/// when `text` is not a quantity. The format comes from the suffix, as `ParseQuantity` keeps
/// it: binary (`Ki`..`Ei`), an exponent (`e3`), else decimal SI; a binary one below 1024 or
/// not a whole number is written as decimal SI (`CanonicalizeBytes`).
pub fn canonical(text: &str) -> Option<String> {
    let text = text.trim();
    let nanos = Amount::parse(text).ok()?.0;
    let suffix = text.trim_start_matches(|c: char| c.is_ascii_digit() || "+-.".contains(c));
    if nanos == 0 {
        return Some("0".into());
    }
    const UNIT: i128 = 1_000_000_000;
    if suffix.ends_with('i') && nanos.abs() >= 1024 * UNIT && nanos % UNIT == 0 {
        let mut value = nanos / UNIT;
        let mut exponent = 0;
        while value % 1024 == 0 && exponent < 6 {
            value /= 1024;
            exponent += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exponent];
        return Some(format!("{value}{suffix}"));
    }
    // mantissa × 10^exponent, trailing zeros taken out, the exponent a multiple of 3.
    let (mut mantissa, mut exponent) = (nanos, -9i32);
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    match exponent.rem_euclid(3) {
        1 => {
            mantissa *= 10;
            exponent -= 1;
        }
        2 => {
            mantissa *= 100;
            exponent -= 2;
        }
        _ => {}
    }
    let suffix = if suffix.starts_with(['e', 'E']) {
        if exponent == 0 {
            String::new()
        } else {
            format!("e{exponent}")
        }
    } else {
        match exponent {
            -9 => "n".into(),
            -6 => "u".into(),
            -3 => "m".into(),
            0 => String::new(),
            3 => "k".into(),
            6 => "M".into(),
            9 => "G".into(),
            12 => "T".into(),
            15 => "P".into(),
            18 => "E".into(),
            e => format!("e{e}"),
        }
    };
    Some(format!("{mantissa}{suffix}"))
}

/// The value of `text` in bytes, rounded up to a whole byte as `Quantity.Value()` does; None
/// when it is not a quantity. Negative quantities are returned as such (validation refuses them).
pub fn bytes(text: &str) -> Option<i128> {
    Amount::parse(text.trim())
        .ok()
        .map(|a| i128::from(a.value()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms_are_the_api_servers() {
        let c = |t: &str| canonical(t).unwrap();
        assert_eq!(c("250m"), "250m");
        assert_eq!(c("0.5"), "500m");
        assert_eq!(c("1.5"), "1500m");
        assert_eq!(c("1000m"), "1");
        assert_eq!(c("1000"), "1k");
        assert_eq!(c("2"), "2");
        assert_eq!(c("64Mi"), "64Mi");
        assert_eq!(c("1024Mi"), "1Gi");
        assert_eq!(c("1.5Gi"), "1536Mi");
        assert_eq!(c("512"), "512");
        assert_eq!(c("100Ki"), "100Ki");
        assert_eq!(c("0.5Ki"), "512", "a binary quantity below 1024 is decimal");
        assert_eq!(c("128974848"), "128974848");
        assert_eq!(c("129e6"), "129e6");
        assert_eq!(c("1e3"), "1e3");
        assert_eq!(c("129M"), "129M");
        assert_eq!(c("0"), "0");
        assert_eq!(c("0Mi"), "0");
        assert_eq!(c("10u"), "10u");
        assert_eq!(canonical("abc"), None);
    }

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

    #[test]
    fn quantities_parse_as_kubernetes_reads_them() {
        let milli = |s: &str| Amount::parse(s).unwrap().milli();
        let value = |s: &str| Amount::parse(s).unwrap().value();
        assert_eq!(milli("100m"), 100);
        assert_eq!(milli("0.5"), 500);
        assert_eq!(milli("1"), 1000);
        assert_eq!(milli("1.5"), 1500);
        assert_eq!(milli("2e-3"), 2);
        assert_eq!(milli("1u"), 1, "rounded up to a milli");
        assert_eq!(value("32Mi"), 32 << 20);
        assert_eq!(value("1Gi"), 1 << 30);
        assert_eq!(value("128M"), 128_000_000);
        assert_eq!(value("1.5Gi"), 3 << 29);
        assert_eq!(value("1e3"), 1000);
        assert_eq!(value("1k"), 1000);
        assert_eq!(value("1E"), 1_000_000_000_000_000_000);
        assert_eq!(Amount::parse("-1").unwrap().value(), -1);
        for bad in ["", "abc", "1x", "1..2", "Mi", "1 Gi", "1mi", "."] {
            assert_eq!(Amount::parse(bad), Err(QUANTITY_FORMAT), "{bad:?}");
        }
    }
}
