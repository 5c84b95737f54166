//! DECIMAL(p, s) values in MySQL's binary form, as NDB stores its Decimal columns.
//!
//! The `p` digits (`p - s` before the point, `s` after) are cut into groups: the integer part's
//! `(p - s) % 9` leading digits, then groups of nine; the fraction's groups of nine, then its
//! `s % 9` trailing digits. Each group is a big-endian integer of 1 to 4 bytes (`DIG2BYTES`:
//! the fewest that hold its digits). A negative number has every byte inverted; then the first
//! byte's top bit is inverted (so it is set for a number ≥ 0). The bytes of two values of one
//! type compare as the numbers do, so the hash index and the ordered index need nothing more.
//! One form: each group below 10^digits, and no negative zero.

/// MySQL's largest precision and scale.
pub const PRECISION_MAX: u8 = 65;
pub const SCALE_MAX: u8 = 30;

/// Digits per full group, and the bytes a group of 0 to 9 digits takes.
const GROUP_DIGITS: usize = 9;
const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// The digits of each group of a DECIMAL(p, s), in storage order.
fn groups(p: u8, s: u8) -> impl Iterator<Item = usize> {
    let (intg, frac) = (usize::from(p.saturating_sub(s)), usize::from(s));
    let lead = Some(intg % GROUP_DIGITS).filter(|&d| d > 0);
    let trail = Some(frac % GROUP_DIGITS).filter(|&d| d > 0);
    (lead.into_iter())
        .chain(std::iter::repeat_n(GROUP_DIGITS, intg / GROUP_DIGITS))
        .chain(std::iter::repeat_n(GROUP_DIGITS, frac / GROUP_DIGITS))
        .chain(trail)
}

/// The bytes of one DECIMAL(p, s) value.
pub fn bin_size(p: u8, s: u8) -> usize {
    groups(p, s).map(|d| DIG2BYTES[d]).sum()
}

/// True when `p` and `s` name a DECIMAL type MySQL has.
pub fn valid_type(p: u8, s: u8) -> bool {
    (1..=PRECISION_MAX).contains(&p) && s <= SCALE_MAX && s <= p
}

/// The sign and the `p` digits of a value in its one form; `None` for any other bytes.
fn digits(bytes: &[u8], p: u8, s: u8) -> Option<(bool, Vec<u8>)> {
    if !valid_type(p, s) || bytes.len() != bin_size(p, s) {
        return None;
    }
    let negative = bytes[0] & 0x80 == 0;
    let mask = if negative { 0xFF } else { 0 };
    let mut digits = Vec::with_capacity(usize::from(p));
    let mut at = 0;
    for d in groups(p, s) {
        let width = DIG2BYTES[d];
        let mut v: u32 = 0;
        for (i, &b) in bytes[at..at + width].iter().enumerate() {
            let b = if at + i == 0 { b ^ 0x80 } else { b };
            v = v << 8 | u32::from(b ^ mask);
        }
        at += width;
        if v >= 10u32.pow(d as u32) {
            return None;
        }
        digits.extend(format!("{v:0d$}").bytes().map(|c| c - b'0'));
    }
    if negative && digits.iter().all(|&d| d == 0) {
        return None;
    }
    Some((negative, digits))
}

/// True when `bytes` is a DECIMAL(p, s) value in its one form.
pub fn is_value(bytes: &[u8], p: u8, s: u8) -> bool {
    digits(bytes, p, s).is_some()
}

/// The value's text as MySQL writes it: a `-` for a negative number, the integer part without
/// leading zeros (`0` at least), then a point and exactly `s` digits when `s` > 0.
pub fn to_text(bytes: &[u8], p: u8, s: u8) -> Option<String> {
    let (negative, digits) = digits(bytes, p, s)?;
    let (int, frac) = digits.split_at(usize::from(p - s));
    let first = int.iter().position(|&d| d != 0).unwrap_or(int.len());
    let mut text = String::with_capacity(usize::from(p) + 3);
    if negative {
        text.push('-');
    }
    if first == int.len() {
        text.push('0');
    }
    text.extend(int[first..].iter().map(|&d| char::from(b'0' + d)));
    if !frac.is_empty() {
        text.push('.');
        text.extend(frac.iter().map(|&d| char::from(b'0' + d)));
    }
    Some(text)
}

/// The DECIMAL(p, s) value of `text` (`[-+]digits[.digits]`, either part may be empty but
/// not both), more fraction digits than `s` rounded half away from zero, as MySQL stores it.
/// An error says what is wrong: not a number, or out of range for the type.
pub fn from_text(text: &str, p: u8, s: u8) -> Result<Vec<u8>, String> {
    if !valid_type(p, s) {
        return Err(format!("DECIMAL({p},{s}) is not a type"));
    }
    let not_number = || format!("{text:?} is not a decimal number");
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let all_digits = |part: &str| part.bytes().all(|c| c.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !all_digits(int) || !all_digits(frac) {
        return Err(not_number());
    }
    let scale = usize::from(s);
    let int = int.trim_start_matches('0');
    // The magnitude in units of 10^-s, as digits, most significant first.
    let mut units: Vec<u8> = int.bytes().map(|c| c - b'0').collect();
    units.extend(frac.bytes().take(scale).map(|c| c - b'0'));
    units.resize(int.len() + scale, 0);
    if frac.as_bytes().get(scale).is_some_and(|&c| c >= b'5') {
        // Round up: add one unit, carrying.
        let mut carry = true;
        for d in units.iter_mut().rev() {
            if !carry {
                break;
            }
            *d = (*d + 1) % 10;
            carry = *d == 0;
        }
        if carry {
            units.insert(0, 1);
        }
    }
    let total = usize::from(p);
    if units.len() > total {
        return Err(format!("{text:?} is out of range for DECIMAL({p},{s})"));
    }
    let mut digits = vec![0; total - units.len()];
    digits.extend(units);
    let negative = negative && digits.iter().any(|&d| d != 0);
    let mask = if negative { 0xFF } else { 0 };
    let mut bytes = Vec::with_capacity(bin_size(p, s));
    let mut at = 0;
    for d in groups(p, s) {
        let v = (digits[at..at + d].iter()).fold(0u32, |v, &digit| v * 10 + u32::from(digit));
        at += d;
        let width = DIG2BYTES[d];
        bytes.extend(v.to_be_bytes()[4 - width..].iter().map(|b| b ^ mask));
    }
    bytes[0] ^= 0x80;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_mysqls() {
        // From MySQL's manual: DECIMAL(18,9) takes 8 bytes, DECIMAL(20,6) 10.
        assert_eq!(bin_size(18, 9), 8);
        assert_eq!(bin_size(20, 6), 10);
        assert_eq!(bin_size(10, 0), 5);
        assert_eq!(bin_size(65, 30), 30);
        assert_eq!(bin_size(1, 1), 1);
    }

    #[test]
    fn mysqls_bytes_for_known_values() {
        // decimal2bin of 1234567890.1234 as DECIMAL(14,4): 81 0D FB 38 D2 04 D2, and of its
        // negation every byte inverted but the first's top bit (the example in MySQL's
        // strings/decimal.cc).
        let positive = from_text("1234567890.1234", 14, 4).expect("in range");
        assert_eq!(positive, [0x81, 0x0D, 0xFB, 0x38, 0xD2, 0x04, 0xD2]);
        let negative = from_text("-1234567890.1234", 14, 4).expect("in range");
        assert_eq!(negative, [0x7E, 0xF2, 0x04, 0xC7, 0x2D, 0xFB, 0x2D]);
    }

    #[test]
    fn text_round_trips_and_orders() {
        let cases = [
            ("-99999.999", "-99999.999"),
            ("-1.5", "-1.500"),
            ("-0.001", "-0.001"),
            ("-0", "0.000"),
            ("0", "0.000"),
            ("0.0004", "0.000"),
            (".0005", "0.001"),
            ("1", "1.000"),
            ("+12.3456", "12.346"),
            ("99999.9994", "99999.999"),
        ];
        let mut previous: Option<Vec<u8>> = None;
        for (text, written) in cases {
            let bytes = from_text(text, 8, 3).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(to_text(&bytes, 8, 3).as_deref(), Some(written), "{text}");
            if let Some(previous) = previous {
                assert!(previous <= bytes, "{text} orders after the one before");
            }
            previous = Some(bytes);
        }
        for (text, error) in [
            ("99999.9995", "out of range"),
            ("100000", "out of range"),
            ("1e3", "not a decimal"),
            ("", "not a decimal"),
            ("-", "not a decimal"),
            (".", "not a decimal"),
            ("1.2.3", "not a decimal"),
            (" 1", "not a decimal"),
        ] {
            let got = from_text(text, 8, 3);
            assert!(
                got.as_ref().is_err_and(|e| e.contains(error)),
                "{text}: {got:?}"
            );
        }
        // A scale of 0 and a precision past one group.
        let big = "-12345678901234567890123456789012345";
        let bytes = from_text(big, 35, 0).expect("in range");
        assert_eq!(to_text(&bytes, 35, 0).as_deref(), Some(big));
        assert_eq!(
            from_text("0.5", 1, 0).map(|b| to_text(&b, 1, 0)),
            Ok(Some("1".into()))
        );
    }

    #[test]
    fn only_the_one_form_is_a_value() {
        let one = from_text("1", 3, 1).expect("in range");
        assert!(is_value(&one, 3, 1));
        // A group of 2 digits holding 100, a negative zero, the wrong length.
        assert!(!is_value(&[0x80 | 100, 0], 3, 1));
        assert!(!is_value(&[0x7F, 0xFF], 3, 1));
        assert!(!is_value(&one[..1], 3, 1));
        assert!(!is_value(&one, 66, 1));
    }
}
