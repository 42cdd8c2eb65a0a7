//! Settings from the environment, read the same way by every crate.
//!
//! Every `CH4_*` variable is declared once, in a [`Setting`] table of the crate that reads it
//! (the facade gathers them into one list), and read through the strict readers here: a value
//! that does not parse is an error naming the variable and what it takes, reported when the
//! rank starts — never a silent fall back to the default (MPICH's control variables behave the
//! same way). Byte counts take a binary suffix: `65536`, `64K`, `64KiB`, `1M`, `2G`.

use crate::{Error, ErrorKind, Result};

/// One documented setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The environment variable, `CH4_...`.
    pub name: &'static str,
    /// The default, as the documentation states it.
    pub default: &'static str,
    /// What it changes.
    pub meaning: &'static str,
}

impl Setting {
    /// A setting named `name`, `default` as the documentation states it, changing `meaning`.
    pub const fn new(name: &'static str, default: &'static str, meaning: &'static str) -> Self {
        Setting {
            name,
            default,
            meaning,
        }
    }
}

/// The raw value of `name`, if set (and valid Unicode; a value that is not is an error).
pub fn raw(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(bad(name, &format!("{v:?}"), "text")),
    }
}

/// The byte count in `name`, if set: a number with an optional binary suffix (`K`, `KiB`, `M`,
/// `MiB`, `G`, `GiB`, upper or lower case).
pub fn bytes(name: &str) -> Result<Option<usize>> {
    let Some(v) = raw(name)? else {
        return Ok(None);
    };
    parse_bytes(&v)
        .map(Some)
        .ok_or_else(|| bad(name, &v, "a number of bytes, like 65536 or 64K"))
}

/// The on/off switch in `name`, if set: `1`/`on`/`yes`/`true` or `0`/`off`/`no`/`false`.
pub fn switch(name: &str) -> Result<Option<bool>> {
    let Some(v) = raw(name)? else {
        return Ok(None);
    };
    parse_switch(&v)
        .map(Some)
        .ok_or_else(|| bad(name, &v, "on or off (1/0, yes/no, true/false)"))
}

/// An on/off value as [`switch`] reads it (`1`/`on`/`yes`/`true`, `0`/`off`/`no`/`false`, any
/// case, spaces around ignored): for a setting that takes other words as well.
pub fn parse_switch(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// The positive whole number in `name`, if set.
pub fn count(name: &str) -> Result<Option<u32>> {
    let Some(v) = raw(name)? else {
        return Ok(None);
    };
    match v.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(bad(name, &v, "a positive whole number")),
    }
}

/// Fails on a set `CH4_*` variable that none of `known` declares — a typo would otherwise be
/// ignored without a word — naming the closest declared one.
pub fn check_known<'a>(known: impl IntoIterator<Item = &'a Setting> + Clone) -> Result<()> {
    for (var, _) in std::env::vars_os() {
        let Some(var) = var.to_str() else { continue };
        if !var.starts_with("CH4_") || known.clone().into_iter().any(|s| s.name == var) {
            continue;
        }
        let closest = known
            .clone()
            .into_iter()
            .min_by_key(|s| edit_distance(s.name, var))
            .map(|s| format!(" (did you mean {}?)", s.name))
            .unwrap_or_default();
        return Err(Error::new(
            ErrorKind::Arg,
            format!("{var} is not a ch4 setting{closest}; unset it or fix its name"),
        ));
    }
    Ok(())
}

/// A value that does not parse: the error names the variable, the value and what it takes.
#[cold]
pub fn bad(name: &str, value: &str, wanted: &str) -> Error {
    Error::new(
        ErrorKind::Arg,
        format!("{name}={value:?} is not valid: it takes {wanted}"),
    )
}

/// A byte count as [`bytes`] reads it (a number with an optional binary suffix); public for
/// the fuzz targets (`fuzz/`), which feed it arbitrary values.
#[doc(hidden)]
pub fn parse_bytes(v: &str) -> Option<usize> {
    let v = v.trim();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    if digits == 0 {
        return None;
    }
    let n: usize = v[..digits].parse().ok()?;
    let shift = match v[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    n.checked_mul(1usize << shift)
}

/// Levenshtein distance, for suggesting a setting's right name.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("65536"), Some(65536));
        assert_eq!(parse_bytes(" 64K "), Some(65536));
        assert_eq!(parse_bytes("64kib"), Some(65536));
        assert_eq!(parse_bytes("1M"), Some(1 << 20));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("0"), Some(0));
        for bad in ["", "abc", "K", "-1", "1.5M", "12Q", "99999999999999999999"] {
            assert_eq!(parse_bytes(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn unparsable_values_are_errors_that_name_the_variable() {
        // A variable of this test alone: the process environment is shared by the tests.
        std::env::set_var("CH4_TEST_ENV_BYTES", "abc");
        let e = bytes("CH4_TEST_ENV_BYTES").unwrap_err();
        assert!(e.to_string().contains("CH4_TEST_ENV_BYTES=\"abc\""), "{e}");
        std::env::set_var("CH4_TEST_ENV_BYTES", "32K");
        assert_eq!(bytes("CH4_TEST_ENV_BYTES").unwrap(), Some(32768));
        std::env::remove_var("CH4_TEST_ENV_BYTES");
        assert_eq!(bytes("CH4_TEST_ENV_BYTES").unwrap(), None);
    }

    #[test]
    fn suggestions_find_the_nearest_name() {
        assert_eq!(
            edit_distance("CH4_SHM_EAGER_LIMIT", "CH4_SHM_EAGERLIMIT"),
            1
        );
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
