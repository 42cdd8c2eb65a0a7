//! How each implementation looks: display name, color, marker and line width.
//!
//! A reader comparing several charts of one run learns "red circles are ch4" once, so an
//! implementation must look the same on every chart. Known names have fixed looks; ch4 is
//! the most prominent (thickest line, drawn on top). Unknown names get a palette slot
//! chosen from a hash of the name, so the same name gets the same color from run to run,
//! moved to the next free slot only if another name of the same run already has it.

use std::collections::BTreeMap;

/// Marker drawn at every median point; differs per implementation so the chart still
/// reads when printed in gray.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// Filled circle.
    Circle,
    /// Filled triangle pointing up.
    Triangle,
    /// Filled square.
    Square,
    /// Filled diamond.
    Diamond,
    /// Hollow circle.
    Ring,
    /// Diagonal cross.
    Cross,
}

/// The look of one implementation on every chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImplStyle {
    /// Name shown in the legend and title (`MPICH` for `mpich`).
    pub label: String,
    /// Line, marker and whisker color as RGB.
    pub rgb: (u8, u8, u8),
    /// Marker shape.
    pub marker: Marker,
    /// Line width in pixels.
    pub width: u32,
}

/// Colors for names other than ch4/mpich/openmpi (Tableau 10 minus the three used above).
const PALETTE: [(u8, u8, u8); 7] = [
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

const MARKERS: [Marker; 4] = [Marker::Diamond, Marker::Ring, Marker::Cross, Marker::Square];

/// How an implementation name is written for humans: the projects' own spelling for the
/// known ones, the name itself otherwise.
pub fn display_name(name: &str) -> String {
    match name {
        "mpich" => "MPICH".to_string(),
        "mpich5" => "MPICH 5".to_string(),
        "openmpi" => "Open MPI".to_string(),
        "intelmpi" => "Intel MPI".to_string(),
        "mvapich" | "mvapich2" => "MVAPICH".to_string(),
        other => other.to_string(),
    }
}

/// Styles for all implementation names of one run.
pub fn assign(names: &[String]) -> BTreeMap<String, ImplStyle> {
    let mut styles = BTreeMap::new();
    let mut used = [false; PALETTE.len()];
    let mut others = 0usize;
    for name in names {
        let fixed = match name.as_str() {
            "ch4" => Some(((200, 30, 45), Marker::Circle, 3)),
            "mpich" => Some(((31, 119, 180), Marker::Triangle, 2)),
            "openmpi" => Some(((44, 160, 44), Marker::Square, 2)),
            _ => None,
        };
        let (rgb, marker, width) = fixed.unwrap_or_else(|| {
            let start = fnv1a(name) as usize % PALETTE.len();
            let slot = (0..PALETTE.len())
                .map(|i| (start + i) % PALETTE.len())
                .find(|&i| !used[i])
                .unwrap_or(start);
            used[slot] = true;
            let marker = MARKERS[others % MARKERS.len()];
            others += 1;
            (PALETTE[slot], marker, 2)
        });
        styles.insert(
            name.clone(),
            ImplStyle {
                label: display_name(name),
                rgb,
                marker,
                width,
            },
        );
    }
    styles
}

/// A fixed, dependency-free string hash (std's hasher is randomly seeded per process).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn known_names_have_fixed_looks_and_ch4_stands_out() {
        let s = assign(&names(&["ch4", "mpich", "openmpi"]));
        assert_eq!(s["mpich"].label, "MPICH");
        assert_eq!(s["openmpi"].label, "Open MPI");
        assert!(s["ch4"].width > s["mpich"].width);
        let alone = assign(&names(&["mpich"]));
        assert_eq!(alone["mpich"], s["mpich"], "same look without ch4");
    }

    #[test]
    fn unknown_names_are_stable_and_distinct() {
        let a = assign(&names(&["ch4", "foo", "bar", "baz"]));
        let b = assign(&names(&["foo"]));
        assert_eq!(a["foo"].rgb, b["foo"].rgb, "color depends on the name only");
        let colors: std::collections::BTreeSet<_> = a.values().map(|s| s.rgb).collect();
        assert_eq!(colors.len(), 4, "no two implementations share a color");
    }

    #[test]
    fn more_names_than_palette_slots_does_not_panic() {
        let many: Vec<String> = (0..20).map(|i| format!("impl{i}")).collect();
        assert_eq!(assign(&many).len(), 20);
    }
}
