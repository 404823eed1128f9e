//! The kernel's own description of its types (BTF, /sys/kernel/btf), read
//! for the few structure offsets a BPF program needs to follow pointers
//! the kernel hands a tracepoint: where a folio keeps its mapping, a
//! mapping its inode, an inode its superblock. They differ between kernel
//! versions and configurations, so they are read from the running kernel,
//! never written down.
//!
//! Only what offsets need is decoded: the type table, the names, and the
//! members of structures and unions (anonymous ones searched through, as
//! C lets code name their members directly). Module BTF (split BTF, whose
//! type ids and names continue the kernel's) is read on top of the
//! kernel's.

use std::fmt;
use std::path::{Path, PathBuf};

const MAGIC: u16 = 0xeb9f;
const HEADER_BYTES: usize = 24;

// Kinds, as linux/btf.h numbers them.
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Why BTF could not be read or a type not found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BtfError {
    /// The file could not be read.
    Read { path: PathBuf, error: String },
    /// The file is not BTF or is cut short.
    Malformed { path: PathBuf, why: String },
    /// No structure or union of that name.
    NoType(String),
    /// The structure has no member at that path.
    NoMember { ty: String, member: String },
}

impl fmt::Display for BtfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BtfError::Read { path, error } => write!(f, "{}: {error}", path.display()),
            BtfError::Malformed { path, why } => {
                write!(f, "{}: not usable BTF: {why}", path.display())
            }
            BtfError::NoType(name) => write!(f, "the kernel's BTF has no type {name}"),
            BtfError::NoMember { ty, member } => {
                write!(f, "the kernel's BTF has no member {member} in {ty}")
            }
        }
    }
}

impl std::error::Error for BtfError {}

/// One entry of the type table.
#[derive(Debug, Clone)]
struct Type {
    name: u32,
    kind: u32,
    /// Members carry bitfield sizes in their offsets' top byte.
    kind_flag: bool,
    /// The size of an int, struct, union or enum; the referenced type of
    /// a pointer, typedef, modifier or function.
    size_or_type: u32,
    /// Struct and union members: (name, type, offset in bits).
    members: Vec<(u32, u32, u32)>,
    /// Function prototype parameters: (name, type).
    params: Vec<(u32, u32)>,
    /// An array's element type and length.
    array: Option<(u32, u32)>,
}

/// A member found by [`Btf::member`]: where it is and how wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Bytes from the start of the outermost structure.
    pub offset: u64,
    /// Its size in bytes (a pointer's is 8 on 64-bit kernels).
    pub size: u64,
    /// Whether it is a pointer.
    pub pointer: bool,
}

/// A parsed BTF type table: the kernel's, with any modules' on top.
#[derive(Debug, Clone, Default)]
pub struct Btf {
    /// Type id 0 is void; ids start at 1.
    types: Vec<Type>,
    strings: Vec<u8>,
}

impl Btf {
    /// The running kernel's BTF (/sys/kernel/btf/vmlinux), with the BTF of
    /// each module named in `modules` that is loaded.
    pub fn kernel(modules: &[&str]) -> Result<Btf, BtfError> {
        let dir = Path::new("/sys/kernel/btf");
        let mut btf = Btf::default();
        btf.add_file(&dir.join("vmlinux"))?;
        for module in modules {
            let path = dir.join(module);
            if path.exists() {
                btf.add_file(&path)?;
            }
        }
        Ok(btf)
    }

    /// Reads `path` on top of what is read already (split BTF continues
    /// the ids and names of its base).
    fn add_file(&mut self, path: &Path) -> Result<(), BtfError> {
        let bytes = std::fs::read(path).map_err(|e| BtfError::Read {
            path: path.to_path_buf(),
            error: e.to_string(),
        })?;
        self.add_bytes(&bytes).map_err(|why| BtfError::Malformed {
            path: path.to_path_buf(),
            why,
        })
    }

    /// Parses one BTF blob on top of what is read already.
    pub fn add_bytes(&mut self, bytes: &[u8]) -> Result<(), String> {
        let u16_at = |at: usize| -> Result<u16, String> {
            bytes
                .get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .ok_or_else(|| format!("cut short at byte {at}"))
        };
        let u32_at = |at: usize| -> Result<u32, String> {
            bytes
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| format!("cut short at byte {at}"))
        };
        let magic = u16_at(0)?;
        if magic != MAGIC {
            return Err(if magic == MAGIC.swap_bytes() {
                "big-endian BTF".to_string()
            } else {
                format!("magic {magic:#06x}, not {MAGIC:#06x}")
            });
        }
        let header = u32_at(4)? as usize;
        if header < HEADER_BYTES {
            return Err(format!("a header of {header} bytes"));
        }
        let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
        let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
        let section = |off: usize, len: usize, what: &str| -> Result<&[u8], String> {
            header
                .checked_add(off)
                .and_then(|start| bytes.get(start..start.checked_add(len)?))
                .ok_or_else(|| format!("its {what} section lies past the end"))
        };
        let types = section(type_off, type_len, "type")?;
        let strings = section(str_off, str_len, "string")?;
        if self.types.is_empty() {
            // Type id 0: void.
            self.types.push(Type {
                name: 0,
                kind: 0,
                kind_flag: false,
                size_or_type: 0,
                members: Vec::new(),
                params: Vec::new(),
                array: None,
            });
        }
        // Split BTF's names continue its base's: its offsets count from the
        // start of the base's names, so appending keeps them right, as
        // appending its types keeps its ids right.
        self.strings.extend_from_slice(strings);
        parse_types(types, &mut self.types)
    }

    /// The name of type `id`, or "" for an anonymous one.
    fn name(&self, offset: u32) -> &str {
        let start = offset as usize;
        let Some(rest) = self.strings.get(start..) else {
            return "";
        };
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    fn get(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize)
    }

    /// The type `id` refers to, through typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> Option<(u32, &Type)> {
        for _ in 0..32 {
            let ty = self.get(id)?;
            match ty.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = ty.size_or_type;
                }
                _ => return Some((id, ty)),
            }
        }
        None
    }

    /// The byte size of type `id`.
    fn size_of(&self, id: u32) -> Option<u64> {
        let (_, ty) = self.resolve(id)?;
        match ty.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => {
                Some(u64::from(ty.size_or_type))
            }
            KIND_PTR => Some(8),
            KIND_ARRAY => {
                let (element, length) = ty.array?;
                Some(self.size_of(element)? * u64::from(length))
            }
            _ => None,
        }
    }

    /// The structure or union named `name` that has members (a forward
    /// declaration of the same name is passed over).
    fn composite(&self, name: &str) -> Option<u32> {
        self.types.iter().enumerate().find_map(|(id, ty)| {
            (matches!(ty.kind, KIND_STRUCT | KIND_UNION)
                && !ty.members.is_empty()
                && self.name(ty.name) == name)
                .then_some(id as u32)
        })
    }

    /// The member at `path` ("root_key.objectid": members of members,
    /// separated by dots) of the structure or union `ty`, members of
    /// anonymous structures and unions found as C finds them.
    pub fn member(&self, ty: &str, path: &str) -> Result<Member, BtfError> {
        let no_member = || BtfError::NoMember {
            ty: ty.to_string(),
            member: path.to_string(),
        };
        let mut id = self
            .composite(ty)
            .ok_or_else(|| BtfError::NoType(ty.to_string()))?;
        let mut offset_bits = 0u64;
        let mut found = None;
        for part in path.split('.') {
            let (bits, member_type) = self.find_member(id, part).ok_or_else(no_member)?;
            offset_bits += bits;
            id = member_type;
            found = Some(member_type);
        }
        let member_type = found.ok_or_else(no_member)?;
        if !offset_bits.is_multiple_of(8) {
            return Err(no_member());
        }
        let (_, resolved) = self.resolve(member_type).ok_or_else(no_member)?;
        Ok(Member {
            offset: offset_bits / 8,
            size: self.size_of(member_type).ok_or_else(no_member)?,
            pointer: resolved.kind == KIND_PTR,
        })
    }

    /// The bit offset and type of member `name` of composite `id`,
    /// searching anonymous members depth first.
    fn find_member(&self, id: u32, name: &str) -> Option<(u64, u32)> {
        let (_, ty) = self.resolve(id)?;
        if !matches!(ty.kind, KIND_STRUCT | KIND_UNION) {
            return None;
        }
        for &(member_name, member_type, offset) in &ty.members {
            let bits = if ty.kind_flag {
                u64::from(offset & 0x00ff_ffff)
            } else {
                u64::from(offset)
            };
            if member_name == 0 {
                if let Some((inner, found)) = self.find_member(member_type, name) {
                    return Some((bits + inner, found));
                }
            } else if self.name(member_name) == name {
                return Some((bits, member_type));
            }
        }
        None
    }

    /// The structure or union the first parameter of raw tracepoint
    /// `tracepoint` points to ("folio" for mm_filemap_add_to_page_cache),
    /// from the `btf_trace_NAME` typedef the kernel defines for each (a
    /// pointer to a prototype whose first parameter is the probe's data).
    pub fn tracepoint_argument(&self, tracepoint: &str, index: usize) -> Option<String> {
        let typedef = format!("btf_trace_{tracepoint}");
        let (_, ty) = self
            .types
            .iter()
            .enumerate()
            .find(|(_, ty)| ty.kind == KIND_TYPEDEF && self.name(ty.name) == typedef)?;
        let (_, pointer) = self.resolve(ty.size_or_type)?;
        if pointer.kind != KIND_PTR {
            return None;
        }
        let (_, prototype) = self.resolve(pointer.size_or_type)?;
        if prototype.kind != KIND_FUNC_PROTO {
            return None;
        }
        // Parameter 0 is the probe's `void *__data`.
        let &(_, argument) = prototype.params.get(index + 1)?;
        let (_, argument) = self.resolve(argument)?;
        if argument.kind != KIND_PTR {
            return None;
        }
        let (_, target) = self.resolve(argument.size_or_type)?;
        matches!(target.kind, KIND_STRUCT | KIND_UNION | KIND_FWD)
            .then(|| self.name(target.name).to_string())
    }
}

/// Appends the entries of a type section to `types`.
fn parse_types(section: &[u8], types: &mut Vec<Type>) -> Result<(), String> {
    let u32_at = |at: usize| -> Result<u32, String> {
        section
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| format!("the type section is cut short at byte {at}"))
    };
    let mut at = 0;
    while at < section.len() {
        let name = u32_at(at)?;
        let info = u32_at(at + 4)?;
        let size_or_type = u32_at(at + 8)?;
        at += 12;
        let vlen = (info & 0xffff) as usize;
        let kind = (info >> 24) & 0x1f;
        let mut ty = Type {
            name,
            kind,
            kind_flag: info >> 31 == 1,
            size_or_type,
            members: Vec::new(),
            params: Vec::new(),
            array: None,
        };
        match kind {
            KIND_INT | KIND_VAR | KIND_DECL_TAG => at += 4,
            KIND_ARRAY => {
                ty.array = Some((u32_at(at)?, u32_at(at + 8)?));
                at += 12;
            }
            KIND_STRUCT | KIND_UNION => {
                for _ in 0..vlen {
                    ty.members
                        .push((u32_at(at)?, u32_at(at + 4)?, u32_at(at + 8)?));
                    at += 12;
                }
            }
            KIND_ENUM => at += 8 * vlen,
            KIND_ENUM64 | KIND_DATASEC => at += 12 * vlen,
            KIND_FUNC_PROTO => {
                for _ in 0..vlen {
                    ty.params.push((u32_at(at)?, u32_at(at + 4)?));
                    at += 8;
                }
            }
            KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
            | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => {}
            other => return Err(format!("type {} has unknown kind {other}", types.len())),
        }
        types.push(ty);
    }
    if at != section.len() {
        return Err("the type section ends inside an entry".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob of: 1 `int` (4 bytes), 2 `struct inner { int a; int b; }`,
    /// 3 `struct outer { int x; union { struct inner in; int y; }; int z:3; }`
    /// with bitfield offsets, 4 the anonymous union, 5 `struct inner *`,
    /// 6 `typedef struct inner *inner_p`, 7 a prototype (void *, inner_p),
    /// 8 `btf_trace_demo`, a typedef of a pointer (9) to that prototype.
    fn blob() -> Vec<u8> {
        let names = b"\0int\0inner\0a\0b\0outer\0x\0in\0y\0z\0inner_p\0btf_trace_demo\0";
        let at = |name: &str| -> u32 {
            let mut offset = 0;
            for part in names.split(|&b| b == 0) {
                if part == name.as_bytes() {
                    return offset;
                }
                offset += part.len() as u32 + 1;
            }
            panic!("{name}")
        };
        let mut types: Vec<u32> = Vec::new();
        let info = |kind: u32, vlen: u32, flag: bool| (u32::from(flag) << 31) | (kind << 24) | vlen;
        // 1: int, 4 bytes, 32 bits.
        types.extend([at("int"), info(KIND_INT, 0, false), 4, 32]);
        // 2: struct inner.
        types.extend([at("inner"), info(KIND_STRUCT, 2, false), 8]);
        types.extend([at("a"), 1, 0, at("b"), 1, 32]);
        // 3: struct outer, members with bitfield-encoded offsets.
        types.extend([at("outer"), info(KIND_STRUCT, 3, true), 16]);
        types.extend([at("x"), 1, 0, 0, 4, 32, at("z"), 1, (3 << 24) | 96]);
        // 4: the anonymous union.
        types.extend([0, info(KIND_UNION, 2, false), 8]);
        types.extend([at("in"), 2, 0, at("y"), 1, 0]);
        // 5: struct inner *; 6: typedef inner_p.
        types.extend([0, info(KIND_PTR, 0, false), 2]);
        types.extend([at("inner_p"), info(KIND_TYPEDEF, 0, false), 5]);
        // 7: prototype (void *, inner_p) returning void; 8: the typedef;
        // 9: the pointer to 7.
        types.extend([0, info(KIND_FUNC_PROTO, 2, false), 0, 0, 10, 0, 6]);
        types.extend([at("btf_trace_demo"), info(KIND_TYPEDEF, 0, false), 9]);
        types.extend([0, info(KIND_PTR, 0, false), 7]);
        // 10: void * for the first parameter.
        types.extend([0, info(KIND_PTR, 0, false), 0]);
        let type_bytes: Vec<u8> = types.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = Vec::new();
        out.extend(MAGIC.to_le_bytes());
        out.extend([1u8, 0]);
        out.extend((HEADER_BYTES as u32).to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((type_bytes.len() as u32).to_le_bytes());
        out.extend((type_bytes.len() as u32).to_le_bytes());
        out.extend((names.len() as u32).to_le_bytes());
        out.extend(&type_bytes);
        out.extend(names);
        out
    }

    #[test]
    fn members_are_found_through_anonymous_unions_and_nested_paths() {
        let mut btf = Btf::default();
        btf.add_bytes(&blob()).unwrap();
        let member = |ty: &str, path: &str| btf.member(ty, path).unwrap();
        assert_eq!(member("outer", "x").offset, 0);
        assert_eq!(member("outer", "in").offset, 4);
        assert_eq!(member("outer", "in").size, 8);
        assert_eq!(member("outer", "in.b").offset, 8);
        assert_eq!(member("outer", "y").offset, 4);
        assert!(!member("outer", "y").pointer);
        // A bitfield at a byte boundary: offset 96 bits, size 3 bits.
        assert_eq!(member("outer", "z").offset, 12);
        assert_eq!(
            btf.member("outer", "nope"),
            Err(BtfError::NoMember {
                ty: "outer".into(),
                member: "nope".into()
            })
        );
        assert_eq!(
            btf.member("absent", "x"),
            Err(BtfError::NoType("absent".into()))
        );
        assert_eq!(btf.tracepoint_argument("demo", 0).as_deref(), Some("inner"));
        assert_eq!(btf.tracepoint_argument("demo", 1), None);
        assert_eq!(btf.tracepoint_argument("missing", 0), None);
    }

    #[test]
    fn bad_blobs_are_refused_with_the_reason() {
        let mut btf = Btf::default();
        assert!(
            btf.add_bytes(&[0x9f, 0xeb])
                .unwrap_err()
                .contains("cut short")
        );
        let mut wrong = blob();
        wrong[0] = 0;
        assert!(btf.add_bytes(&wrong).unwrap_err().contains("magic"));
        let mut short = blob();
        short.truncate(HEADER_BYTES + 10);
        assert!(btf.add_bytes(&short).unwrap_err().contains("past the end"));
    }

    /// pahole's `/* offset size */` for member `name` of `ty`, read from
    /// the kernel's BTF: an independent reader of the same data.
    fn pahole(ty: &str, name: &str) -> Option<(u64, u64)> {
        let out = std::process::Command::new("pahole")
            .args(["-C", ty, "/sys/kernel/btf/vmlinux"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let wanted = format!(" {name};");
        let line = text
            .lines()
            .find(|l| l.contains(&wanted) || l.contains(&format!("*{name};")))?;
        let comment = line.split("/*").nth(1)?.split("*/").next()?;
        let mut numbers = comment.split_whitespace().map(|n| n.parse::<u64>());
        Some((numbers.next()?.ok()?, numbers.next()?.ok()?))
    }

    #[test]
    fn the_kernels_offsets_agree_with_pahole() {
        if !Path::new("/sys/kernel/btf/vmlinux").exists() {
            eprintln!("SKIPPED: this kernel has no BTF");
            return;
        }
        if pahole("inode", "i_ino").is_none() {
            if std::env::var_os("COLDSTART_REQUIRE_ROOT").is_some_and(|v| v == "1") {
                panic!("pahole (dwarves) is needed as the oracle");
            }
            eprintln!("SKIPPED: pahole (dwarves) is not installed");
            return;
        }
        let btf = Btf::kernel(&["btrfs"]).unwrap();
        for (ty, member) in [
            ("folio", "mapping"),
            ("address_space", "host"),
            ("inode", "i_sb"),
            ("inode", "i_ino"),
            ("super_block", "s_magic"),
            ("super_block", "s_dev"),
            ("btrfs_inode", "root"),
            ("btrfs_inode", "vfs_inode"),
            ("btrfs_root", "anon_dev"),
        ] {
            let ours = btf.member(ty, member).unwrap();
            assert_eq!(
                Some((ours.offset, ours.size)),
                pahole(ty, member),
                "{ty}.{member}"
            );
        }
        assert!(btf.member("address_space", "host").unwrap().pointer);
        assert_eq!(
            btf.tracepoint_argument("mm_filemap_add_to_page_cache", 0)
                .as_deref(),
            Some("folio")
        );
        assert_eq!(
            btf.tracepoint_argument("mm_filemap_fault", 0).as_deref(),
            Some("address_space")
        );
    }
}
