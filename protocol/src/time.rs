//! TIME(fsp) values: a signed count of microseconds, carried by `Value::Int64` (integers order
//! and hash as the times do), and their text as MySQL writes it, `[-]hh:mm:ss[.f…]`.
//! One form: within MySQL's range, ±838:59:59, and no finer than `fsp` fraction digits.

/// MySQL's last TIME, 838:59:59, in microseconds.
pub const MAX_MICROS: i64 = (838 * 3600 + 59 * 60 + 59) * 1_000_000;

/// The microseconds one unit of the last of `fsp` fraction digits stands for.
fn unit(fsp: u8) -> i64 {
    10i64.pow(6 - u32::from(fsp.min(6)))
}

/// True when `micros` is a TIME(fsp) value in its one form.
pub fn is_value(micros: i64, fsp: u8) -> bool {
    (-MAX_MICROS..=MAX_MICROS).contains(&micros) && micros % unit(fsp) == 0
}

/// The value's text: a `-` when negative, at least two hour digits, then `:mm:ss` and, when
/// `fsp` > 0, a point and exactly `fsp` digits.
pub fn to_text(micros: i64, fsp: u8) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    let seconds = m / 1_000_000;
    let (h, min, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let mut text = format!("{sign}{h:02}:{min:02}:{s:02}");
    if fsp > 0 {
        let fraction = format!("{:06}", m % 1_000_000);
        text.push('.');
        text.push_str(&fraction[..usize::from(fsp.min(6))]);
    }
    text
}

/// The TIME(fsp) value of `text`, `[-]h…:mm:ss[.f…]` with at most `fsp` fraction digits.
pub fn from_text(text: &str, fsp: u8) -> Result<i64, String> {
    let bad = |why: &str| format!("{text:?} is not a TIME({fsp}) ({why})");
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (clock, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let mut parts = clock.split(':');
    let (Some(h), Some(m), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("hh:mm:ss"));
    };
    let number = |part: &str, digits: std::ops::RangeInclusive<usize>| {
        (digits.contains(&part.len()) && part.bytes().all(|c| c.is_ascii_digit()))
            .then(|| part.parse::<i64>().ok())
            .flatten()
    };
    let (Some(h), Some(m), Some(s)) = (number(h, 1..=3), number(m, 2..=2), number(s, 2..=2)) else {
        return Err(bad("hh:mm:ss"));
    };
    if m > 59 || s > 59 {
        return Err(bad("minutes and seconds below 60"));
    }
    if fraction.len() > usize::from(fsp) || unsigned.contains('.') && fraction.is_empty() {
        return Err(bad(&format!("at most {fsp} fraction digits")));
    }
    let Some(f) = number(&format!("{fraction:0<6}"), 6..=6) else {
        return Err(bad("fraction digits"));
    };
    let micros = (h * 3600 + m * 60 + s) * 1_000_000 + f;
    if micros > MAX_MICROS {
        return Err(bad("at most 838:59:59"));
    }
    Ok(if negative { -micros } else { micros })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_the_range_holds() {
        for (text, fsp, micros) in [
            ("00:00:00", 0, 0),
            ("-838:59:59", 0, -MAX_MICROS),
            ("838:59:59.000", 3, MAX_MICROS),
            ("-00:00:01.5", 1, -1_500_000),
            ("12:30:05.000001", 6, 45_005_000_001),
        ] {
            assert_eq!(from_text(text, fsp), Ok(micros), "{text}");
            assert_eq!(to_text(micros, fsp), text);
            assert!(is_value(micros, fsp));
        }
        assert_eq!(from_text("1:02:03", 0), Ok(3_723_000_000));
        assert_eq!(
            from_text("01:02:03.5", 3).map(|m| to_text(m, 3)),
            Ok("01:02:03.500".into())
        );
        for (text, fsp, why) in [
            ("839:00:00", 0, "at most 838:59:59"),
            ("838:59:59.1", 1, "at most 838:59:59"),
            ("10:60:00", 0, "below 60"),
            ("10:00:00.1", 0, "at most 0 fraction digits"),
            ("10:00:00.", 2, "fraction digits"),
            ("10:00", 0, "hh:mm:ss"),
            ("10:0:00", 0, "hh:mm:ss"),
            ("1000:00:00", 0, "hh:mm:ss"),
            ("10:00:00:00", 0, "hh:mm:ss"),
            ("+10:00:00", 0, "hh:mm:ss"),
            ("10:00:0x", 0, "hh:mm:ss"),
        ] {
            let got = from_text(text, fsp);
            assert!(
                got.as_ref().is_err_and(|e| e.contains(why)),
                "{text}: {got:?}"
            );
        }
        assert!(!is_value(MAX_MICROS + 1, 6));
        assert!(!is_value(1_500, 2));
        assert!(is_value(10_000, 2));
    }
}
