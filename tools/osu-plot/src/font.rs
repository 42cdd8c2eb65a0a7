//! Finding and registering the one TrueType font all chart text is drawn with.
//!
//! plotters' `ab_glyph` feature rasterizes text in pure Rust but ships no font and does not
//! search the system: a font must be registered at run time. That keeps the build free of
//! fontconfig/freetype (which plotters' default `ttf` feature needs), at the price of this
//! small lookup: `--font PATH`, else `$OSU_PLOT_FONT`, else DejaVu Sans from Debian's
//! `fonts-dejavu-core`.

use crate::Error;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The font used when neither `--font` nor [`FONT_ENV`] names one.
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Environment variable naming a font file, for machines without DejaVu at the default path.
pub const FONT_ENV: &str = "OSU_PLOT_FONT";

/// The family name the renderer asks plotters for.
pub(crate) const FAMILY: &str = "sans-serif";

/// Pick the font path: the command-line value wins over the environment, which wins over
/// [`DEFAULT_FONT`]. An empty environment value counts as unset.
pub fn resolve(cli: Option<PathBuf>, env: Option<OsString>) -> PathBuf {
    cli.or_else(|| env.filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_FONT))
}

/// The last font registered, so rendering many charts (or many tests) reads the file once.
static REGISTERED: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Load the font at `path` and make it the font of every chart drawn afterwards.
///
/// plotters keeps registered fonts for the life of the process and wants `'static` bytes,
/// so the file contents are leaked; this happens once per distinct path.
pub fn register(path: &Path) -> Result<(), Error> {
    let mut registered = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if registered.as_deref() == Some(path) {
        return Ok(());
    }
    let bytes = std::fs::read(path).map_err(|source| Error::Font {
        path: path.to_path_buf(),
        reason: if source.kind() == std::io::ErrorKind::NotFound {
            format!(
                "font file not found; install the Debian/Ubuntu package `fonts-dejavu-core` \
                 (apt-get install fonts-dejavu-core), or name any .ttf with --font PATH or \
                 {FONT_ENV}=PATH"
            )
        } else {
            format!("cannot read font file: {source}")
        },
    })?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, plotters::style::FontStyle::Normal, bytes).map_err(
        |_| Error::Font {
            path: path.to_path_buf(),
            reason: "not a TrueType/OpenType font file".to_string(),
        },
    )?;
    *registered = Some(path.to_path_buf());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order() {
        let cli = Some(PathBuf::from("/a.ttf"));
        let env = Some(OsString::from("/b.ttf"));
        assert_eq!(resolve(cli.clone(), env.clone()), PathBuf::from("/a.ttf"));
        assert_eq!(resolve(None, env), PathBuf::from("/b.ttf"));
        assert_eq!(
            resolve(None, Some(OsString::new())),
            PathBuf::from(DEFAULT_FONT)
        );
        assert_eq!(resolve(None, None), PathBuf::from(DEFAULT_FONT));
    }

    #[test]
    fn missing_font_names_the_package() {
        let e = register(Path::new("/nonexistent/osu-plot/NoSuchFont.ttf")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("fonts-dejavu-core"), "{msg}");
        assert!(msg.contains("NoSuchFont.ttf"), "{msg}");
    }

    #[test]
    fn non_font_file_is_rejected() {
        let dir = crate::tests::temp_dir("notafont");
        let path = dir.join("fake.ttf");
        std::fs::write(&path, b"this is not a font").unwrap();
        let e = register(&path).unwrap_err();
        assert!(e.to_string().contains("not a TrueType"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
