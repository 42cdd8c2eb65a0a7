//! Values read from the environment: the strict readers' byte counts and switches
//! (`ch4_core::env`) and the rails list (`CH4_RAILS`, `netmod-rails/src/spec.rs`). A launcher
//! passes one environment to every rank, so a bad value must stop the start with an error, not
//! a panic or a misread.

use std::net::IpAddr;

use netmod_rails::spec::{self, HostAddr};

use crate::input::Input;

/// Input: a byte choosing the reader, then the value as text.
pub fn settings(data: &[u8]) {
    let mut input = Input::new(data);
    let which = input.u8();
    let Ok(text) = std::str::from_utf8(input.rest()) else {
        return;
    };
    match which % 3 {
        0 => {
            if let Some(n) = ch4_core::env::parse_bytes(text) {
                // A count of bytes is its digits times a power of 1024.
                let digits: String = text
                    .trim()
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let base: usize = digits.parse().expect("the digits parsed once already");
                assert!(n == base || (base != 0 && n % base == 0 && (n / base).is_power_of_two()));
            }
        }
        1 => {
            let _ = ch4_core::env::parse_switch(text);
        }
        _ => {
            let Ok(specs) = spec::parse(text) else {
                return;
            };
            assert!(!specs.is_empty());
            let host: Vec<HostAddr> = [
                ("lo", "127.0.0.1"),
                ("eth0", "192.168.1.5"),
                ("eth1", "10.1.0.7"),
                ("eth1", "fe80::1"),
                ("ib0", "10.2.0.7"),
            ]
            .iter()
            .map(|(n, a)| HostAddr {
                name: (*n).to_string(),
                addr: a.parse::<IpAddr>().expect("a literal address"),
            })
            .collect();
            if let Ok(rails) = spec::resolve(&specs, &host, |n| (n.len() as u64).checked_sub(3)) {
                assert_eq!(rails.len(), specs.len());
                assert!(
                    rails.iter().all(|r| r.weight > 0) || specs.iter().all(|s| s.weight.is_none())
                );
            }
        }
    }
}
