//! Decides the shape of the sample app from a spec: which unit goes in
//! which module, how many functions each unit defines and of what kind and
//! size, which functions the startup path calls and who calls them.
//!
//! Function bodies are not decided here; `emit` draws them from a stream of
//! their own per function, so the design and the manifest stay small.

use std::ops::Range;

use anyhow::Result;

use crate::manifest::{
    Function, FunctionKind, GroundTruth, MANIFEST_FORMAT, Module, ModuleLayout, SizeClass,
    StartupCall, StaticInitializer, TranslationUnit,
};
use crate::rng::Rng;
use crate::spec::SampleSpec;

pub(crate) const HEADER: &str = "cs_sample.h";
pub(crate) const RUNTIME_SOURCE: &str = "runtime.cpp";
pub(crate) const MAIN_SOURCE: &str = "main.cpp";
pub(crate) const LIBRARY_OUTPUT: &str = "libcssample.so";
pub(crate) const EXECUTABLE_OUTPUT: &str = "cssample";
pub(crate) const ROOT_NAMESPACE: &str = "cs_sample";

/// The virtual methods of `cs_sample::Component`; each class overrides some.
pub(crate) const SLOTS: [&str; 6] = [
    "on_load",
    "configure",
    "resolve",
    "prepare",
    "validate",
    "publish",
];

const CLASS_NOUNS: [&str; 12] = [
    "Loader",
    "Parser",
    "Cache",
    "Codec",
    "Session",
    "Router",
    "Index",
    "Shader",
    "Font",
    "Plugin",
    "Scheduler",
    "Store",
];

/// Share of functions that are virtual methods, in percent.
const VIRTUAL_PERCENT: u64 = 20;
/// Share of units with a static initializer, in percent.
const STATIC_INIT_PERCENT: u64 = 60;
/// Share of never-run functions that call another function, in percent: real
/// cold code calls other code too, which gives the binaries PLT entries and
/// call edges beyond the startup path.
const COLD_CALL_PERCENT: u64 = 25;
/// Deep enough to look like real startup stacks, shallow enough for any stack.
const MAX_STARTUP_DEPTH: usize = 24;

// Purposes of the independent random streams (see `Rng::stream`).
const STREAM_LAYOUT: u64 = 1;
const STREAM_UNIT: u64 = 2;
const STREAM_STARTUP: u64 = 3;
const STREAM_COLD_CALLS: u64 = 4;
pub(crate) const STREAM_BODY: u64 = 5;
pub(crate) const STREAM_DATA: u64 = 6;

pub(crate) struct Design {
    pub spec: SampleSpec,
    pub units: Vec<Unit>,
    pub functions: Vec<Func>,
    pub classes: Vec<Class>,
    /// The startup path in first-call order.
    pub startup: Vec<StartupCall>,
    /// Functions `main` calls, in call order.
    pub main_callees: Vec<u32>,
    /// Digits in a unit number (`tu0042`).
    pub unit_digits: usize,
    /// The part libraries.
    pub parts: Vec<crate::manifest::Part>,
}

pub(crate) struct Unit {
    pub index: u32,
    /// Namespace and file stem, e.g. `tu0042`.
    pub name: String,
    pub module: Module,
    pub functions: Range<u32>,
    /// Classes defined here, in order.
    pub classes: Vec<u32>,
    pub static_initializer: bool,
    /// Optional global data, so the binaries carry the usual mix of
    /// relocated pointer tables and plain data.
    pub name_table: bool,
    pub dispatch_table: bool,
    pub counters: bool,
}

pub(crate) struct Class {
    pub name: String,
    /// Function ids of its methods, in id order.
    pub methods: Vec<u32>,
}

impl Class {
    /// The global instance.
    pub fn instance(&self) -> String {
        self.name.to_ascii_lowercase()
    }

    /// The exported `Component*` to the instance that every virtual call goes
    /// through; not const, so not even the defining unit can devirtualize it.
    pub fn reference(&self) -> String {
        format!("{}_ref", self.instance())
    }
}

pub(crate) struct Func {
    pub id: u32,
    pub unit: u32,
    pub module: Module,
    /// Unqualified name: `f0042_07`, or the overridden slot for a method.
    pub local_name: String,
    /// The class whose method this is; `None` for a free function.
    pub class: Option<u32>,
    pub size_class: SizeClass,
    /// Functions this one calls, in call order.
    pub callees: Vec<u32>,
}

impl Design {
    pub fn new(spec: &SampleSpec) -> Result<Design> {
        spec.validate()?;
        let mut layout = Rng::stream(spec.seed, STREAM_LAYOUT, 0);
        let modules = assign_modules(spec, &mut layout);
        let counts = distribute_functions(spec, &mut layout);
        let unit_digits = digits(spec.translation_units - 1).max(4);
        let local_digits = digits(counts.iter().copied().max().unwrap_or(1) - 1).max(2);

        let mut design = Design {
            spec: spec.clone(),
            units: Vec::with_capacity(counts.len()),
            functions: Vec::with_capacity(spec.functions as usize),
            classes: Vec::new(),
            startup: Vec::new(),
            main_callees: Vec::new(),
            unit_digits,
            parts: crate::parts::design(spec),
        };
        for (index, (&module, &count)) in modules.iter().zip(&counts).enumerate() {
            design.add_unit(index as u32, module, count, local_digits);
        }
        design.ensure_static_initializer_in_each_module();
        design.plan_startup();
        design.plan_cold_calls();
        Ok(design)
    }

    fn add_unit(&mut self, index: u32, module: Module, count: u32, local_digits: usize) {
        let mut rng = Rng::stream(self.spec.seed, STREAM_UNIT, u64::from(index));
        let name = format!("tu{index:0width$}", width = self.unit_digits);
        let first = self.functions.len() as u32;
        let mut pending_methods = Vec::new();
        for local in 0..count {
            let id = first + local;
            let is_method = rng.percent(VIRTUAL_PERCENT);
            if is_method {
                pending_methods.push(id);
            }
            self.functions.push(Func {
                id,
                unit: index,
                module,
                local_name: format!(
                    "f{index:0uw$}_{local:0lw$}",
                    uw = self.unit_digits,
                    lw = local_digits
                ),
                class: None,
                size_class: draw_size_class(&mut rng),
                callees: Vec::new(),
            });
        }
        let classes = self.group_into_classes(&pending_methods, &mut rng);
        let has_free_function = pending_methods.len() < count as usize;
        self.units.push(Unit {
            index,
            name,
            module,
            functions: first..first + count,
            classes,
            static_initializer: rng.percent(STATIC_INIT_PERCENT),
            name_table: rng.percent(50),
            dispatch_table: has_free_function && rng.percent(40),
            counters: rng.percent(35),
        });
    }

    /// Gives each run of methods a class overriding that many distinct slots.
    fn group_into_classes(&mut self, methods: &[u32], rng: &mut Rng) -> Vec<u32> {
        let mut classes = Vec::new();
        let mut rest = methods;
        while !rest.is_empty() {
            let size = rng.between(1, rest.len().min(SLOTS.len()) as u32) as usize;
            let (members, tail) = rest.split_at(size);
            rest = tail;
            let mut slots: Vec<usize> = (0..SLOTS.len()).collect();
            rng.shuffle(&mut slots);
            let class = self.classes.len() as u32;
            let noun = CLASS_NOUNS[rng.index(CLASS_NOUNS.len())];
            for (&id, &slot) in members.iter().zip(&slots) {
                let function = &mut self.functions[id as usize];
                function.class = Some(class);
                function.local_name = SLOTS[slot].to_string();
            }
            self.classes.push(Class {
                name: format!("{noun}{}", classes.len()),
                methods: members.to_vec(),
            });
            classes.push(class);
        }
        classes
    }

    /// `.init_array` in both binaries is part of what the sample shows.
    fn ensure_static_initializer_in_each_module(&mut self) {
        for module in [Module::Library, Module::Executable] {
            let covered = self
                .units
                .iter()
                .any(|u| u.module == module && u.static_initializer);
            if !covered && let Some(unit) = self.units.iter_mut().find(|u| u.module == module) {
                unit.static_initializer = true;
            }
        }
    }

    /// Picks the startup functions spread over as many units as possible,
    /// orders them at random (not by address), and hangs them in a call tree
    /// whose pre-order is that order, so first calls happen exactly in it.
    fn plan_startup(&mut self) {
        let mut rng = Rng::stream(self.spec.seed, STREAM_STARTUP, 0);
        let mut order = self.pick_startup_functions(&mut rng);
        rng.shuffle(&mut order);

        // The path from `main` to the previous call; a new call hangs off one
        // of these (or `main`), which keeps the tree's pre-order equal to
        // `order`.
        let mut stack: Vec<u32> = Vec::new();
        for &callee in &order {
            let callee_module = self.functions[callee as usize].module;
            // Library code cannot call into the executable.
            let may_call = |caller: u32| {
                callee_module == Module::Library
                    || self.functions[caller as usize].module == Module::Executable
            };
            let deepen = stack.len() < MAX_STARTUP_DEPTH
                && stack.last().is_some_and(|&top| may_call(top))
                && rng.percent(55);
            let parent = if deepen {
                Some(stack.len() - 1)
            } else {
                let candidates: Vec<usize> = (0..stack.len().min(MAX_STARTUP_DEPTH))
                    .filter(|&depth| may_call(stack[depth]))
                    .collect();
                let pick = rng.index(candidates.len() + 1);
                candidates.get(pick).copied()
            };
            let caller = match parent {
                Some(depth) => {
                    stack.truncate(depth + 1);
                    let caller = stack[depth];
                    self.functions[caller as usize].callees.push(callee);
                    Some(caller)
                }
                None => {
                    stack.clear();
                    self.main_callees.push(callee);
                    None
                }
            };
            stack.push(callee);
            self.startup.push(StartupCall {
                function: callee,
                caller,
                virtual_call: self.functions[callee as usize].class.is_some(),
            });
        }
    }

    /// Draws one function per unit in a shuffled round-robin over units,
    /// starting with one executable and one library unit so both modules are
    /// always on the path, and includes a virtual method when there is room.
    fn pick_startup_functions(&self, rng: &mut Rng) -> Vec<u32> {
        let wanted = self.spec.startup_functions() as usize;
        let mut unit_order: Vec<usize> = (0..self.units.len()).collect();
        rng.shuffle(&mut unit_order);
        for (front, module) in [Module::Executable, Module::Library]
            .into_iter()
            .enumerate()
        {
            if let Some(at) =
                (front..unit_order.len()).find(|&at| self.units[unit_order[at]].module == module)
            {
                unit_order.swap(front, at);
            }
        }

        let mut pools: Vec<Vec<u32>> = self
            .units
            .iter()
            .map(|u| u.functions.clone().collect())
            .collect();
        let mut chosen = Vec::with_capacity(wanted);
        while chosen.len() < wanted {
            for &unit in &unit_order {
                if chosen.len() == wanted {
                    break;
                }
                let pool = &mut pools[unit];
                if !pool.is_empty() {
                    let at = rng.index(pool.len());
                    chosen.push(pool.swap_remove(at));
                }
            }
        }

        let has_method = |id: &u32| self.functions[*id as usize].class.is_some();
        if wanted >= 3 && !chosen.iter().any(has_method) {
            let methods: Vec<u32> = (0..self.functions.len() as u32)
                .filter(has_method)
                .collect();
            if !methods.is_empty() {
                // The first two picks carry the one-per-module guarantee.
                let replace = 2 + rng.index(wanted - 2);
                chosen[replace] = methods[rng.index(methods.len())];
            }
        }
        chosen
    }

    /// Adds calls between functions the startup path never runs. Callees
    /// always have a higher id, so the call graph has no cycles even if a
    /// later change runs cold code.
    fn plan_cold_calls(&mut self) {
        let mut rng = Rng::stream(self.spec.seed, STREAM_COLD_CALLS, 0);
        let mut on_startup = vec![false; self.functions.len()];
        for call in &self.startup {
            on_startup[call.function as usize] = true;
        }
        let total = self.functions.len() as u32;
        for id in 0..total.saturating_sub(1) {
            if on_startup[id as usize] || !rng.percent(COLD_CALL_PERCENT) {
                continue;
            }
            let wanted = if rng.percent(30) { 2 } else { 1 };
            let caller_module = self.functions[id as usize].module;
            let mut callees = Vec::new();
            for _ in 0..8 {
                if callees.len() == wanted {
                    break;
                }
                let callee = id + 1 + rng.below(u64::from(total - id - 1)) as u32;
                let allowed = caller_module == Module::Executable
                    || self.functions[callee as usize].module == Module::Library;
                if allowed && !callees.contains(&callee) {
                    callees.push(callee);
                }
            }
            self.functions[id as usize].callees = callees;
        }
    }

    /// Fully qualified name of a unit's namespace member, e.g.
    /// `cs_sample::tu0042::f0042_07`.
    pub fn qualified(&self, unit: u32, member: &str) -> String {
        format!(
            "::{ROOT_NAMESPACE}::{}::{member}",
            self.units[unit as usize].name
        )
    }

    pub fn ground_truth(&self) -> GroundTruth {
        let translation_units = self
            .units
            .iter()
            .map(|unit| TranslationUnit {
                index: unit.index,
                source: source_name(&unit.name),
                module: unit.module,
                first_function: unit.functions.start,
                function_count: unit.functions.len() as u32,
                static_initializer: unit.static_initializer,
                cold_code_bytes: self.spec.cold_code_bytes_per_unit(),
            })
            .collect();
        let functions = self
            .functions
            .iter()
            .map(|function| {
                let unit = &self.units[function.unit as usize].name;
                let mut path = vec![ROOT_NAMESPACE, unit.as_str()];
                if let Some(class) = function.class {
                    path.push(&self.classes[class as usize].name);
                }
                path.push(&function.local_name);
                Function {
                    id: function.id,
                    symbol: mangle(&path, "i"),
                    name: format!("{}(int)", path.join("::")),
                    tu: function.unit,
                    module: function.module,
                    kind: match function.class {
                        Some(_) => FunctionKind::VirtualMethod,
                        None => FunctionKind::Free,
                    },
                    size_class: function.size_class,
                }
            })
            .collect();
        let static_initializers = self
            .units
            .iter()
            .filter(|unit| unit.static_initializer)
            .map(|unit| {
                let class = [ROOT_NAMESPACE, unit.name.as_str(), "UnitInit"];
                StaticInitializer {
                    tu: unit.index,
                    module: unit.module,
                    constructor: format!("{}C1Ev", mangle_prefix(&class)),
                    constructor_name: format!("{}::UnitInit()", class.join("::")),
                    init_function: None,
                }
            })
            .collect();
        GroundTruth {
            format: MANIFEST_FORMAT,
            spec: self.spec.clone(),
            header: HEADER.to_string(),
            library: ModuleLayout {
                output: LIBRARY_OUTPUT.to_string(),
                support_source: RUNTIME_SOURCE.to_string(),
            },
            executable: ModuleLayout {
                output: EXECUTABLE_OUTPUT.to_string(),
                support_source: MAIN_SOURCE.to_string(),
            },
            translation_units,
            functions,
            startup_order: self.startup.clone(),
            static_initializers,
            parts: self.parts.clone(),
            build: None,
        }
    }
}

pub(crate) fn source_name(unit_name: &str) -> String {
    format!("{unit_name}.cpp")
}

/// The global definition `emit` puts first in every unit, which gcc names
/// the executable's initializers after.
pub(crate) const FIRST_GLOBAL: &str = "unit_table";

/// Name of the function `.init_array` points at for a unit's static
/// initializer. `named_after_file` is true for clang, and for gcc when
/// compiling position-independent code for a shared library; otherwise gcc
/// uses the first global symbol the unit defines.
pub(crate) fn init_function(unit_source: &str, named_after_file: bool) -> String {
    if named_after_file {
        return format!("_GLOBAL__sub_I_{unit_source}");
    }
    let unit = unit_source.strip_suffix(".cpp").unwrap_or(unit_source);
    let first = mangle_prefix(&[ROOT_NAMESPACE, unit, FIRST_GLOBAL]);
    format!("_GLOBAL__sub_I_{first}E")
}

/// Shuffles the units and puts the first `library_units` in the library, so
/// library and executable units interleave in index order as in real trees.
fn assign_modules(spec: &SampleSpec, rng: &mut Rng) -> Vec<Module> {
    let mut order: Vec<usize> = (0..spec.translation_units as usize).collect();
    rng.shuffle(&mut order);
    let mut modules = vec![Module::Executable; order.len()];
    for &unit in &order[..spec.library_units() as usize] {
        modules[unit] = Module::Library;
    }
    modules
}

/// One function per unit, and the rest spread by random weights from 1 to
/// 81 so unit sizes vary the way real source files do.
fn distribute_functions(spec: &SampleSpec, rng: &mut Rng) -> Vec<u32> {
    let units = spec.translation_units as usize;
    let mut cumulative = Vec::with_capacity(units);
    let mut total = 0u64;
    for _ in 0..units {
        let root = u64::from(rng.between(1, 9));
        total += root * root;
        cumulative.push(total);
    }
    let mut counts = vec![1u32; units];
    for _ in spec.translation_units..spec.functions {
        let pick = rng.below(total);
        counts[cumulative.partition_point(|&end| end <= pick)] += 1;
    }
    counts
}

/// Mostly small functions with a long tail of large ones, as in real code.
fn draw_size_class(rng: &mut Rng) -> SizeClass {
    match rng.below(100) {
        0..50 => SizeClass::Tiny,
        50..80 => SizeClass::Small,
        80..95 => SizeClass::Medium,
        _ => SizeClass::Large,
    }
}

fn digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Itanium C++ ABI nested name without its closing `E`: `_ZN9cs_sample6tu0042`.
fn mangle_prefix(path: &[&str]) -> String {
    let mut symbol = String::from("_ZN");
    for part in path {
        symbol.push_str(&part.len().to_string());
        symbol.push_str(part);
    }
    symbol
}

/// Mangled name of a non-const function in nested namespaces or classes,
/// with `parameters` already mangled (`i` for one `int`).
fn mangle(path: &[&str], parameters: &str) -> String {
    format!("{}E{parameters}", mangle_prefix(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangles_like_the_itanium_abi() {
        // Expected strings checked with `c++filt` by hand.
        assert_eq!(
            mangle(&["cs_sample", "tu0042", "f0042_07"], "i"),
            "_ZN9cs_sample6tu00428f0042_07Ei"
        );
        assert_eq!(
            mangle(&["cs_sample", "tu0003", "Loader0", "publish"], "i"),
            "_ZN9cs_sample6tu00037Loader07publishEi"
        );
    }

    #[test]
    fn counts_digits() {
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(399), 3);
    }

    #[test]
    fn every_function_belongs_to_exactly_one_unit() {
        let design = Design::new(&SampleSpec::default_size()).expect("design");
        assert_eq!(design.functions.len(), 10_000);
        let mut next = 0;
        for unit in &design.units {
            assert_eq!(unit.functions.start, next);
            assert!(!unit.functions.is_empty());
            next = unit.functions.end;
        }
        assert_eq!(next, 10_000);
    }

    #[test]
    fn library_code_never_calls_the_executable() {
        let design = Design::new(&SampleSpec::default_size()).expect("design");
        for function in &design.functions {
            if function.module == Module::Library {
                for &callee in &function.callees {
                    assert_eq!(design.functions[callee as usize].module, Module::Library);
                }
            }
        }
    }
}
