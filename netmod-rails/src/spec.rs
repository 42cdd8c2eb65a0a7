//! `CH4_RAILS`: which interfaces carry a job's traffic, and with what share of the data.
//!
//! The same value must serve every host of a job (a launcher passes one environment to all), so
//! a rail is named the way Open MPI's `btl_tcp_if_include` names one: by interface name
//! (`eth1`), which each host resolves to its own address, or by subnet (`10.1.0.0/16`), in which
//! each host finds its address. A plain address (`127.0.0.2`) works too, for one host. Each may
//! carry a weight (`eth1@25`): its share of striped data against the others'. Without weights
//! the shares follow the links' speeds as the kernel reports them
//! (`/sys/class/net/<name>/speed`), when it knows every rail's; otherwise they are equal.

use std::net::IpAddr;

use ch4_core::{env, Error, ErrorKind, Result};

/// The variable that lists the rails.
pub const RAILS_VAR: &str = "CH4_RAILS";

const WANTED: &str = "a comma-separated list of interfaces (eth1), subnets (10.1.0.0/16) or \
                      addresses, each optionally with a weight (eth1@25)";

/// One rail as `CH4_RAILS` names it, before it is found on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailSpec {
    /// Where the rail is, as written.
    pub place: Place,
    /// Its share of striped data, if given.
    pub weight: Option<u64>,
}

/// How a rail is named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// An interface, by name: each host uses its own address on it.
    Interface(String),
    /// A subnet: each host uses its address inside it.
    Subnet(IpAddr, u8),
    /// One address of this host.
    Address(IpAddr),
}

/// A rail found on this host: the address to listen on and its share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rail {
    /// What the user wrote, for messages and the settings summary.
    pub name: String,
    /// This host's address on the rail.
    pub addr: IpAddr,
    /// Its share of striped data against the other rails' (never 0).
    pub weight: u64,
}

/// Parses a `CH4_RAILS` value.
pub fn parse(value: &str) -> Result<Vec<RailSpec>> {
    let bad = || env::bad(RAILS_VAR, value, WANTED);
    let mut specs = Vec::new();
    for item in value.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(bad());
        }
        let (place, weight) = match item.split_once('@') {
            Some((p, w)) => {
                let w: u64 = w.trim().parse().map_err(|_| bad())?;
                if w == 0 {
                    return Err(env::bad(RAILS_VAR, value, "weights above 0"));
                }
                (p.trim(), Some(w))
            }
            None => (item, None),
        };
        let place = if let Some((net, len)) = place.split_once('/') {
            let net: IpAddr = net.parse().map_err(|_| bad())?;
            let len: u8 = len.parse().map_err(|_| bad())?;
            if len > if net.is_ipv4() { 32 } else { 128 } {
                return Err(bad());
            }
            Place::Subnet(net, len)
        } else if let Ok(addr) = place.parse::<IpAddr>() {
            Place::Address(addr)
        } else if !place.is_empty()
            && place
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
        {
            Place::Interface(place.to_string())
        } else {
            return Err(bad());
        };
        specs.push(RailSpec { place, weight });
    }
    if specs.iter().any(|s| s.weight.is_some()) && specs.iter().any(|s| s.weight.is_none()) {
        return Err(env::bad(
            RAILS_VAR,
            value,
            "a weight for every rail or for none",
        ));
    }
    if specs.len() > u8::MAX as usize {
        return Err(env::bad(RAILS_VAR, value, "at most 255 rails"));
    }
    Ok(specs)
}

/// An interface of this host: its name and one address.
#[derive(Clone, Debug)]
pub struct HostAddr {
    /// The interface's name.
    pub name: String,
    /// One of its addresses.
    pub addr: IpAddr,
}

/// This host's interfaces and addresses.
pub fn host_addrs() -> Result<Vec<HostAddr>> {
    let found = if_addrs::get_if_addrs().map_err(|e| {
        Error::new(
            ErrorKind::Transport,
            format!("{RAILS_VAR}: cannot list this host's interfaces: {e}"),
        )
    })?;
    Ok(found
        .into_iter()
        .map(|i| HostAddr {
            addr: i.ip(),
            name: i.name,
        })
        .collect())
}

/// Finds every rail of `specs` among `host`'s interfaces, and gives each its weight (the one
/// written, else the link speeds `speed_of` reports when it knows every rail's, else equal).
pub fn resolve(
    specs: &[RailSpec],
    host: &[HostAddr],
    speed_of: impl Fn(&str) -> Option<u64>,
) -> Result<Vec<Rail>> {
    let mut rails = Vec::with_capacity(specs.len());
    let mut speeds = Vec::with_capacity(specs.len());
    for spec in specs {
        let (name, found) = match &spec.place {
            Place::Interface(name) => (
                name.clone(),
                // IPv4 first: what a host's second network usually carries.
                host.iter()
                    .filter(|h| &h.name == name)
                    .min_by_key(|h| h.addr.is_ipv6())
                    .cloned(),
            ),
            Place::Subnet(net, len) => (
                format!("{net}/{len}"),
                host.iter().find(|h| in_subnet(h.addr, *net, *len)).cloned(),
            ),
            // An address no interface lists may still be this host's (all of 127/8 is): the
            // listener's bind decides.
            Place::Address(addr) => (
                addr.to_string(),
                Some(
                    host.iter()
                        .find(|h| h.addr == *addr)
                        .cloned()
                        .unwrap_or(HostAddr {
                            name: addr.to_string(),
                            addr: *addr,
                        }),
                ),
            ),
        };
        let Some(found) = found else {
            let names: Vec<String> = host
                .iter()
                .map(|h| format!("{} {}", h.name, h.addr))
                .collect();
            return Err(Error::new(
                ErrorKind::Transport,
                format!(
                    "{RAILS_VAR}: rail {name} is not on this host (its interfaces: {})",
                    names.join(", ")
                ),
            ));
        };
        if rails.iter().any(|r: &Rail| r.addr == found.addr) {
            return Err(Error::new(
                ErrorKind::Arg,
                format!(
                    "{RAILS_VAR}: rail {name} is {} again, which an earlier rail already uses",
                    found.addr
                ),
            ));
        }
        speeds.push(speed_of(&found.name).filter(|&s| s > 0));
        rails.push(Rail {
            name,
            addr: found.addr,
            weight: spec.weight.unwrap_or(0),
        });
    }
    // Written weights, else the link speeds when every rail's is known, else equal shares.
    if specs.iter().all(|s| s.weight.is_none()) {
        let known: Option<Vec<u64>> = speeds.into_iter().collect();
        for (i, rail) in rails.iter_mut().enumerate() {
            rail.weight = known.as_ref().map_or(1, |k| k[i]);
        }
    }
    Ok(rails)
}

/// The link speed in Mb/s the kernel reports for interface `name`, if it knows one (a virtual
/// or down interface reports none, or -1).
pub fn link_speed(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
        .ok()?
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|&s| s > 0)
        .map(|s| s as u64)
}

/// Whether `addr` lies in `net/len`.
fn in_subnet(addr: IpAddr, net: IpAddr, len: u8) -> bool {
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Vec<HostAddr> {
        [
            ("lo", "127.0.0.1"),
            ("eth0", "192.168.1.5"),
            ("eth1", "fe80::1"),
            ("eth1", "10.1.0.7"),
            ("eth2", "10.2.0.7"),
        ]
        .iter()
        .map(|(n, a)| HostAddr {
            name: n.to_string(),
            addr: a.parse().unwrap(),
        })
        .collect()
    }

    #[test]
    fn names_subnets_addresses_and_weights_parse() {
        let specs = parse("eth1@1, 10.2.0.0/16@25,127.0.0.1@5").unwrap();
        assert_eq!(specs[0].place, Place::Interface("eth1".into()));
        assert_eq!(specs[0].weight, Some(1));
        assert_eq!(
            specs[1].place,
            Place::Subnet("10.2.0.0".parse().unwrap(), 16)
        );
        assert_eq!(specs[1].weight, Some(25));
        assert_eq!(specs[2].place, Place::Address("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn malformed_values_are_refused_with_the_syntax() {
        for v in [
            "",
            "eth1,",
            "eth1@",
            "eth1@0",
            "eth1@x",
            "10.0.0.0/33",
            "a b",
            "x/y",
        ] {
            let e = parse(v).unwrap_err();
            assert!(e.to_string().contains("CH4_RAILS"), "{v}: {e}");
        }
    }

    #[test]
    fn each_host_finds_its_own_address_by_name_or_subnet() {
        let specs = parse("eth1,10.2.0.0/16").unwrap();
        let rails = resolve(&specs, &host(), |_| None).unwrap();
        assert_eq!(rails[0].addr, "10.1.0.7".parse::<IpAddr>().unwrap());
        assert_eq!(rails[1].addr, "10.2.0.7".parse::<IpAddr>().unwrap());
        assert_eq!((rails[0].weight, rails[1].weight), (1, 1));
    }

    #[test]
    fn a_rail_not_on_this_host_is_an_error_listing_what_is() {
        let e = resolve(&parse("eth9").unwrap(), &host(), |_| None).unwrap_err();
        assert!(e.to_string().contains("eth9") && e.to_string().contains("eth2 10.2.0.7"));
        let e = resolve(&parse("eth1,10.1.0.0/24").unwrap(), &host(), |_| None).unwrap_err();
        assert!(e.to_string().contains("already"), "{e}");
    }

    #[test]
    fn weights_come_from_the_user_else_the_link_speeds_else_are_equal() {
        fn weights(rails: &str, speed_of: impl Fn(&str) -> Option<u64>) -> Vec<u64> {
            let rails = resolve(&parse(rails).unwrap(), &host(), speed_of).unwrap();
            rails.iter().map(|r| r.weight).collect()
        }
        assert!(parse("eth1@3,eth2").is_err());
        assert_eq!(weights("eth1@3,eth2@1", |_| Some(100)), [3, 1]);
        let speeds = |n: &str| Some(if n == "eth1" { 25_000 } else { 10_000 });
        assert_eq!(weights("eth1,eth2", speeds), [25_000, 10_000]);
        let half = |n: &str| (n == "eth1").then_some(25_000);
        assert_eq!(weights("eth1,eth2", half), [1, 1]);
    }
}
