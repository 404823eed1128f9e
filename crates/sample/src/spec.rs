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
}

/// Larger specs are refused: they would take hours to compile and are no
/// more useful as an example.
const MAX_TRANSLATION_UNITS: u32 = 20_000;
const MAX_FUNCTIONS: u32 = 2_000_000;

impl SampleSpec {
    /// About the size of a mid-sized real program: 400 units, 20,000
    /// functions, 5% of them on the startup path, 75% of units in the library.
    pub fn default_size() -> Self {
        SampleSpec {
            seed: 1,
            translation_units: 400,
            functions: 20_000,
            startup_share: 0.05,
            library_share: 0.75,
        }
    }

    /// Small enough to build in a second or two, for unit tests.
    pub fn tiny() -> Self {
        SampleSpec {
            translation_units: 6,
            functions: 60,
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
        Ok(())
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
        assert_eq!(SampleSpec::default_size().library_units(), 300);
        assert_eq!(SampleSpec::default_size().startup_functions(), 1000);
    }
}
