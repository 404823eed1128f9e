//! What to generate: the seed and the size of the sample app, and the
//! checks that turn an impossible request into a clear error.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// The size and shape of one sample app. The same spec always generates
/// byte-identical sources and ground truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleSpec {
    /// Seed of every random choice.
    pub seed: u64,
    /// Generated C++ translation units, split between the library and the
    /// executable. Two fixed support files (`runtime.cpp`, `main.cpp`) come on
    /// top of these.
    pub translation_units: u32,
    /// Generated functions (free functions and virtual methods) over all
    /// translation units; at least one per unit.
    pub functions: u32,
    /// Share of the functions that the startup path calls, in (0, 1].
    /// At least two are always called, one in each module.
    pub startup_share: f64,
    /// Share of the translation units placed in the shared library, in
    /// (0, 1); each module gets at least one unit whatever the rounding.
    pub library_share: f64,
    /// Code no start runs, in KiB over all translation units (split evenly
    /// between them), placed among the functions as real programs keep
    /// their startup code apart among code that never runs.
    #[serde(default)]
    pub cold_code_kib: u32,
    /// Part libraries: shared libraries of generated assembly (code,
    /// read-only tables and relocated pointers) that the executable needs
    /// and whose static initializers touch a sparse eighth of them.
    #[serde(default)]
    pub parts: u32,
    /// Size of each part library's code, tables and pointers, in KiB.
    #[serde(default)]
    pub part_kib: u32,
    /// Work the part initializers do per page they touch, in iterations of
    /// a dependent add (about a cycle each), done right after the touch:
    /// a real start parses, computes and sets up between its reads, and a
    /// prefetch overlaps its reads with that work. Firefox ESR's warm start
    /// spends about 16 us per page it touches.
    #[serde(default)]
    pub work_per_page: u32,
}

/// Larger specs are refused: they would take hours to compile and are no
/// more useful as an example.
const MAX_TRANSLATION_UNITS: u32 = 20_000;
const MAX_FUNCTIONS: u32 = 2_000_000;
/// Limits that keep a generated app within a few GiB of disk.
const MAX_COLD_CODE_KIB: u32 = 1 << 20;
const MAX_PARTS: u32 = 1000;
const MAX_PART_KIB: u32 = 1 << 20;
/// About a millisecond per page touched: far more than any real start.
const MAX_WORK_PER_PAGE: u32 = 4_000_000;
/// A part needs a few pages of each kind.
pub(crate) const MIN_PART_KIB: u32 = 64;

impl SampleSpec {
    /// Shaped like a big native program whose cold start waits on the disk:
    /// 200 units, 10,000 functions (5% of them on the startup path, 75% of
    /// units in the library) among 120 MiB of code no start runs, and 24 part
    /// libraries of 8 MiB each, of which the start touches an eighth, with
    /// about 4 us of work per page touched. About 320 MiB on disk; a start
    /// touches about 35 MiB of it.
    pub fn default_size() -> Self {
        SampleSpec {
            seed: 1,
            translation_units: 200,
            functions: 10_000,
            startup_share: 0.05,
            library_share: 0.75,
            cold_code_kib: 120 * 1024,
            parts: 24,
            part_kib: 8 * 1024,
            work_per_page: 12_000,
        }
    }

    /// Small enough to build in a second or two, for unit tests.
    pub fn tiny() -> Self {
        SampleSpec {
            translation_units: 6,
            functions: 60,
            cold_code_kib: 48,
            parts: 2,
            part_kib: 256,
            work_per_page: 0,
            ..SampleSpec::default_size()
        }
    }

    /// Checks that the spec describes a program that can be generated.
    pub fn validate(&self) -> Result<()> {
        if self.translation_units < 2 {
            bail!(
                "the sample app needs at least 2 translation units (one for the library, one \
                 for the executable), got {}",
                self.translation_units
            );
        }
        if self.translation_units > MAX_TRANSLATION_UNITS {
            bail!(
                "at most {MAX_TRANSLATION_UNITS} translation units are supported, got {}",
                self.translation_units
            );
        }
        if self.functions < self.translation_units {
            bail!(
                "functions ({}) must be at least translation_units ({}): every unit defines at \
                 least one function",
                self.functions,
                self.translation_units
            );
        }
        if self.functions > MAX_FUNCTIONS {
            bail!(
                "at most {MAX_FUNCTIONS} functions are supported, got {}",
                self.functions
            );
        }
        if !(self.startup_share > 0.0 && self.startup_share <= 1.0) {
            bail!(
                "startup_share must be in (0, 1], got {}",
                self.startup_share
            );
        }
        if !(self.library_share > 0.0 && self.library_share < 1.0) {
            bail!(
                "library_share must be in (0, 1) so that both the library and the executable \
                 have code, got {}",
                self.library_share
            );
        }
        if self.cold_code_kib > MAX_COLD_CODE_KIB {
            bail!(
                "cold_code_kib must be at most {MAX_COLD_CODE_KIB}, got {}",
                self.cold_code_kib
            );
        }
        if self.parts > MAX_PARTS {
            bail!(
                "at most {MAX_PARTS} part libraries are supported, got {}",
                self.parts
            );
        }
        if self.parts > 0 && !(MIN_PART_KIB..=MAX_PART_KIB).contains(&self.part_kib) {
            bail!(
                "part_kib must be in {MIN_PART_KIB}..={MAX_PART_KIB} when there are part \
                 libraries, got {}",
                self.part_kib
            );
        }
        if self.work_per_page > MAX_WORK_PER_PAGE {
            bail!(
                "work_per_page must be at most {MAX_WORK_PER_PAGE}, got {}",
                self.work_per_page
            );
        }
        Ok(())
    }

    /// Bytes of cold code each unit gets, a multiple of 16.
    pub fn cold_code_bytes_per_unit(&self) -> u32 {
        let total = u64::from(self.cold_code_kib) * 1024;
        ((total / u64::from(self.translation_units.max(1))) & !15) as u32
    }

    /// Units placed in the library; the rest go to the executable.
    pub fn library_units(&self) -> u32 {
        let wanted = (f64::from(self.translation_units) * self.library_share).round() as u32;
        wanted.clamp(1, self.translation_units - 1)
    }

    /// Functions on the startup path.
    pub fn startup_functions(&self) -> u32 {
        let wanted = (f64::from(self.functions) * self.startup_share).round() as u32;
        wanted.clamp(2, self.functions)
    }
}

impl Default for SampleSpec {
    fn default() -> Self {
        SampleSpec::default_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(spec: SampleSpec) -> String {
        format!("{:#}", spec.validate().expect_err("spec should be refused"))
    }

    #[test]
    fn the_presets_are_valid() {
        SampleSpec::default_size().validate().expect("default size");
        SampleSpec::tiny().validate().expect("tiny");
        assert_eq!(SampleSpec::default(), SampleSpec::default_size());
    }

    #[test]
    fn refuses_fewer_functions_than_units() {
        let spec = SampleSpec {
            functions: 5,
            ..SampleSpec::tiny()
        };
        assert!(error_of(spec).contains("functions (5) must be at least translation_units (6)"));
    }

    #[test]
    fn refuses_shares_out_of_range() {
        let nan = SampleSpec {
            startup_share: f64::NAN,
            ..SampleSpec::tiny()
        };
        assert!(error_of(nan).contains("startup_share"));
        let all_library = SampleSpec {
            library_share: 1.0,
            ..SampleSpec::tiny()
        };
        assert!(error_of(all_library).contains("library_share"));
    }

    #[test]
    fn refuses_parts_too_small_to_hold_their_sections() {
        let spec = SampleSpec {
            part_kib: 8,
            ..SampleSpec::tiny()
        };
        assert!(error_of(spec).contains("part_kib must be in 64..="));
        let none = SampleSpec {
            parts: 0,
            part_kib: 0,
            ..SampleSpec::tiny()
        };
        none.validate().expect("no parts need no size");
    }

    #[test]
    fn cold_code_is_split_evenly_in_multiples_of_16() {
        let spec = SampleSpec::default_size();
        assert_eq!(spec.cold_code_bytes_per_unit(), 629_136);
        let odd = SampleSpec {
            translation_units: 7,
            cold_code_kib: 1,
            ..SampleSpec::tiny()
        };
        assert_eq!(odd.cold_code_bytes_per_unit(), 144);
    }

    #[test]
    fn refuses_a_single_unit() {
        let spec = SampleSpec {
            translation_units: 1,
            functions: 10,
            ..SampleSpec::tiny()
        };
        assert!(error_of(spec).contains("at least 2 translation units"));
    }

    #[test]
    fn both_modules_get_a_unit_whatever_the_share() {
        let spec = SampleSpec {
            translation_units: 2,
            functions: 2,
            library_share: 0.99,
            ..SampleSpec::tiny()
        };
        assert_eq!(spec.library_units(), 1);
        assert_eq!(spec.startup_functions(), 2);
        assert_eq!(SampleSpec::default_size().library_units(), 150);
        assert_eq!(SampleSpec::default_size().startup_functions(), 500);
    }
}
