//! What the experiment varies: the factors of a library's load cost, the
//! levels each is measured at, and the configurations that result. Every
//! configuration is the base library with exactly one factor changed, so a
//! factor's fitted slope is its own cost and nothing else's.

use serde::Serialize;
use std::fmt;

/// One property of a library whose load cost the experiment measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Factor {
    /// R_X86_64_RELATIVE relocations in `.rela.dyn` (pointers to the
    /// library's own data in `.data.rel.ro`).
    Relative,
    /// The same relative relocations packed as DT_RELR (`-z pack-relative-relocs`).
    Relr,
    /// Symbolic R_X86_64_64 relocations, all against one exported symbol.
    Symbolic,
    /// Symbolic relocations each against its own exported symbol: one symbol
    /// lookup through the global scope per relocation.
    Distinct,
    /// Exported symbols (dynamic symbol table and hash table entries) that
    /// nothing relocates against.
    Exported,
    /// Calls through the PLT, one R_X86_64_JUMP_SLOT each, bound lazily.
    PltLazy,
    /// The same PLT calls bound at load (`-z now`).
    PltNow,
    /// Static initializers (`.init_array` entries), each a trivial function.
    Initializers,
    /// Existing, empty directories in the search path (DT_RUNPATH) before
    /// the one holding the library.
    Search,
    /// The same code and data split over this many libraries.
    Libraries,
    /// MiB of read-only data the start never touches.
    Size,
}

impl Factor {
    pub const ALL: [Factor; 11] = [
        Factor::Relative,
        Factor::Relr,
        Factor::Symbolic,
        Factor::Distinct,
        Factor::Exported,
        Factor::PltLazy,
        Factor::PltNow,
        Factor::Initializers,
        Factor::Search,
        Factor::Libraries,
        Factor::Size,
    ];

    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Factor::Relative => "relative",
            Factor::Relr => "relr",
            Factor::Symbolic => "symbolic",
            Factor::Distinct => "distinct",
            Factor::Exported => "exported",
            Factor::PltLazy => "plt_lazy",
            Factor::PltNow => "plt_now",
            Factor::Initializers => "initializers",
            Factor::Search => "search",
            Factor::Libraries => "libraries",
            Factor::Size => "size",
        }
    }

    pub fn from_name(name: &str) -> Option<Factor> {
        Factor::ALL.into_iter().find(|f| f.name() == name)
    }

    /// What one unit of the factor is, for "cost per ...".
    pub fn unit(self) -> &'static str {
        match self {
            Factor::Relative | Factor::Relr | Factor::Symbolic => "relocation",
            Factor::Distinct => "symbol lookup",
            Factor::Exported => "exported symbol",
            Factor::PltLazy | Factor::PltNow => "PLT slot",
            Factor::Initializers => "initializer",
            Factor::Search => "search-path entry",
            Factor::Libraries => "library",
            Factor::Size => "MiB",
        }
    }

    /// A sentence for tables and plots.
    pub fn description(self) -> &'static str {
        match self {
            Factor::Relative => "relative relocations (RELA)",
            Factor::Relr => "relative relocations packed as RELR",
            Factor::Symbolic => "symbolic relocations against one symbol",
            Factor::Distinct => "symbolic relocations, one distinct symbol each",
            Factor::Exported => "exported symbols, never referenced",
            Factor::PltLazy => "PLT slots, lazy binding",
            Factor::PltNow => "PLT slots, bound at load (-z now)",
            Factor::Initializers => "static initializers",
            Factor::Search => "empty search-path entries before the library",
            Factor::Libraries => "libraries holding the same code",
            Factor::Size => "MiB of untouched read-only data",
        }
    }

    /// The levels of the full experiment: five, evenly spaced, starting at
    /// the base library's value, large enough that the top level stands out
    /// of a warm start's noise (LibreOffice's biggest library has 344,244
    /// relative relocations; Chromium has 1.14 M).
    fn full_levels(self) -> [u64; 5] {
        match self {
            Factor::Relative | Factor::Relr => [0, 50_000, 100_000, 150_000, 200_000],
            Factor::Symbolic => [0, 25_000, 50_000, 75_000, 100_000],
            Factor::Distinct | Factor::PltLazy | Factor::PltNow | Factor::Initializers => {
                [0, 2_000, 4_000, 6_000, 8_000]
            }
            Factor::Exported => [0, 4_000, 8_000, 12_000, 16_000],
            Factor::Search => [0, 8, 16, 24, 32],
            Factor::Libraries => [1, 4, 8, 12, 16],
            Factor::Size => [0, 16, 32, 48, 64],
        }
    }

    /// A tenth of the work, for a quick look and for tests.
    fn quick_levels(self) -> [u64; 3] {
        match self {
            Factor::Relative | Factor::Relr => [0, 5_000, 10_000],
            Factor::Symbolic => [0, 2_500, 5_000],
            Factor::Distinct | Factor::PltLazy | Factor::PltNow | Factor::Initializers => {
                [0, 200, 400]
            }
            Factor::Exported => [0, 400, 800],
            Factor::Search => [0, 2, 4],
            Factor::Libraries => [1, 2, 3],
            Factor::Size => [0, 1, 2],
        }
    }
}

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a configuration's library is brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `dlopen` by name from a running program, timed around the call.
    Dlopen,
    /// A DT_NEEDED entry of the program, timed from `execve` to `main`.
    Needed,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Dlopen, Mode::Needed];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Dlopen => "dlopen",
            Mode::Needed => "needed",
        }
    }
}

/// The page-cache state of the library's files when a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cache {
    /// The files were used just before, so they are in the page cache.
    Warm,
    /// The library files were evicted (posix_fadvise DONTNEED) just before;
    /// the program, libc and directories stay cached.
    Cold,
}

impl Cache {
    pub const ALL: [Cache; 2] = [Cache::Warm, Cache::Cold];

    pub fn name(self) -> &'static str {
        match self {
            Cache::Warm => "warm",
            Cache::Cold => "cold",
        }
    }
}

/// The base library's properties with one factor set to a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Config {
    pub factor: Factor,
    pub level: u64,
}

impl Config {
    /// A name unique within a design, usable as a directory name.
    pub fn slug(&self) -> String {
        format!("{}-{}", self.factor.name(), self.level)
    }

    /// How many libraries the program loads for this configuration.
    pub fn library_count(&self) -> u64 {
        if self.factor == Factor::Libraries {
            self.level.max(1)
        } else {
            1
        }
    }
}

/// The fixed code and data the `libraries` factor splits: the base of that
/// factor is one library holding all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SplitBody {
    /// Relative relocations in total, over all the libraries.
    pub relative: u64,
    /// Exported functions in total.
    pub functions: u64,
}

/// The whole experiment: which configurations, how often each is timed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Design {
    pub factors: Vec<Factor>,
    /// The levels of every factor, in `factors` order.
    pub levels: Vec<Vec<u64>>,
    /// Timed rounds; each round times every configuration in every mode and
    /// cache state once, in a shuffled order.
    pub rounds: usize,
    pub modes: Vec<Mode>,
    pub caches: Vec<Cache>,
    pub split: SplitBody,
    /// Whether this is the reduced (`--quick`) design.
    pub quick: bool,
}

impl Design {
    /// The full experiment over `factors`.
    pub fn full(factors: &[Factor], rounds: usize) -> Design {
        Design {
            factors: factors.to_vec(),
            levels: factors.iter().map(|f| f.full_levels().to_vec()).collect(),
            rounds,
            modes: Mode::ALL.to_vec(),
            caches: Cache::ALL.to_vec(),
            split: SplitBody {
                relative: 64_000,
                functions: 1_024,
            },
            quick: false,
        }
    }

    /// Three small levels per factor: a look at the shape in seconds.
    pub fn quick(factors: &[Factor], rounds: usize) -> Design {
        Design {
            factors: factors.to_vec(),
            levels: factors.iter().map(|f| f.quick_levels().to_vec()).collect(),
            rounds,
            modes: Mode::ALL.to_vec(),
            caches: Cache::ALL.to_vec(),
            split: SplitBody {
                relative: 6_000,
                functions: 96,
            },
            quick: true,
        }
    }

    /// Every configuration, factor by factor, level by level.
    pub fn configs(&self) -> Vec<Config> {
        self.factors
            .iter()
            .zip(&self.levels)
            .flat_map(|(&factor, levels)| levels.iter().map(move |&level| Config { factor, level }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_factor_round_trips_its_name_and_has_distinct_levels() {
        for factor in Factor::ALL {
            assert_eq!(Factor::from_name(factor.name()), Some(factor));
            for levels in [
                factor.full_levels().to_vec(),
                factor.quick_levels().to_vec(),
            ] {
                assert!(
                    levels.windows(2).all(|w| w[0] < w[1]),
                    "{factor}: {levels:?}"
                );
            }
        }
        assert_eq!(Factor::from_name("nope"), None);
    }

    #[test]
    fn configs_are_one_per_factor_level_with_unique_names() {
        let design = Design::full(&Factor::ALL, 3);
        let configs = design.configs();
        assert_eq!(configs.len(), Factor::ALL.len() * 5);
        let mut slugs: Vec<String> = configs.iter().map(Config::slug).collect();
        slugs.sort();
        slugs.dedup();
        assert_eq!(slugs.len(), configs.len());
    }
}
