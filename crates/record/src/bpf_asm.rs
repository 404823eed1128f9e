//! The recorder's BPF programs are written here, instruction by
//! instruction (docs/architecture.md says why no BPF compiler is used):
//! the instruction encoding, the few forms the programs use, the helpers
//! they call, and the jumps patched once their targets are known.

use coldstart_system::bpf;

// The BPF helpers the programs call, as linux/bpf.h numbers them.
pub const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
pub const HELPER_KTIME_GET_NS: i32 = 5;
pub const HELPER_GET_SMP_PROCESSOR_ID: i32 = 8;
pub const HELPER_GET_CURRENT_PID_TGID: i32 = 14;
pub const HELPER_PROBE_READ_KERNEL: i32 = 113;
pub const HELPER_PROBE_READ_USER_STR: i32 = 114;
pub const HELPER_RINGBUF_RESERVE: i32 = 131;
pub const HELPER_RINGBUF_SUBMIT: i32 = 132;

/// One BPF instruction, as the kernel reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

pub fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

// The few instruction forms the programs need.
pub fn mov_reg(dst: u8, src: u8) -> Insn {
    insn(0xbf, dst, src, 0, 0)
}
pub fn mov_imm(dst: u8, imm: i32) -> Insn {
    insn(0xb7, dst, 0, 0, imm)
}
pub fn add_imm(dst: u8, imm: i32) -> Insn {
    insn(0x07, dst, 0, 0, imm)
}
pub fn rsh_imm(dst: u8, imm: i32) -> Insn {
    insn(0x77, dst, 0, 0, imm)
}
pub fn load_u64(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x79, dst, src, off, 0)
}
pub fn load_u32(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x61, dst, src, off, 0)
}
pub fn store_u64(dst: u8, off: i16, src: u8) -> Insn {
    insn(0x7b, dst, src, off, 0)
}
pub fn store_u64_imm(dst: u8, off: i16, imm: i32) -> Insn {
    insn(0x7a, dst, 0, off, imm)
}
pub fn store_u32(dst: u8, off: i16, src: u8) -> Insn {
    insn(0x63, dst, src, off, 0)
}
pub fn store_u32_imm(dst: u8, off: i16, imm: i32) -> Insn {
    insn(0x62, dst, 0, off, imm)
}
pub fn atomic_add_u64(dst: u8, off: i16, src: u8) -> Insn {
    insn(0xdb, dst, src, off, 0)
}
pub fn jump_if_eq(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x15, dst, 0, off, imm)
}
pub fn jump_if_ne(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x55, dst, 0, off, imm)
}
pub fn jump_if_ne_reg(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x5d, dst, src, off, 0)
}
pub fn jump(off: i16) -> Insn {
    insn(0x05, 0, 0, off, 0)
}
pub fn call(helper: i32) -> Insn {
    insn(0x85, 0, 0, 0, helper)
}
pub fn exit() -> Insn {
    insn(0x95, 0, 0, 0, 0)
}
/// Two instructions loading a 64-bit constant.
pub fn load_imm64(dst: u8, value: u64) -> [Insn; 2] {
    [
        insn(0x18, dst, 0, 0, value as u32 as i32),
        insn(0, 0, 0, 0, (value >> 32) as u32 as i32),
    ]
}
/// Two instructions loading a map's descriptor (BPF_PSEUDO_MAP_FD).
pub fn load_map(dst: u8, map: &bpf::Map) -> [Insn; 2] {
    [insn(0x18, dst, 1, 0, map.raw_fd()), insn(0, 0, 0, 0, 0)]
}

/// Appends: add 1 to the u64 in slot 0 of the array map `counter` (using
/// the stack word at r10 - 4). Returns the index of the jump taken when the
/// map has no slot, for the caller to point past the addition.
pub fn add_one_to_counter(p: &mut Vec<Insn>, counter: &bpf::Map) -> usize {
    p.extend([
        mov_imm(1, 0),
        store_u32(10, -4, 1),
        mov_reg(2, 10),
        add_imm(2, -4),
    ]);
    p.extend(load_map(1, counter));
    p.push(call(HELPER_MAP_LOOKUP_ELEM));
    let no_slot = p.len();
    p.push(jump_if_eq(0, 0, 0));
    p.extend([mov_imm(1, 1), atomic_add_u64(0, 0, 1)]);
    no_slot
}

/// Points the jump at `from` to `target` (both instruction indices).
pub fn patch_jump(program: &mut [Insn], from: usize, target: usize) {
    program[from].off = (target as i64 - from as i64 - 1) as i16;
}

/// The instructions as the kernel reads them.
pub fn encode(insns: &[Insn]) -> Vec<u8> {
    let mut code = Vec::with_capacity(insns.len() * 8);
    for i in insns {
        code.push(i.code);
        code.push(i.regs);
        code.extend_from_slice(&i.off.to_ne_bytes());
        code.extend_from_slice(&i.imm.to_ne_bytes());
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_linux_bpf_h_lays_them_out() {
        // r2 = *(u64 *)(r6 + 16): opcode 0x79, dst 2 in the low nibble.
        assert_eq!(
            encode(&[load_u64(2, 6, 16)]),
            [0x79, 0x62, 16, 0, 0, 0, 0, 0]
        );
        // A 64-bit constant is split over two instructions, low word first.
        let wide = load_imm64(3, 0x1122_3344_9123_683e);
        assert_eq!(wide[0].imm as u32, 0x9123_683e);
        assert_eq!(wide[1].imm as u32, 0x1122_3344);
        let mut jumps = [jump_if_eq(0, 0, 0), exit(), exit(), exit()];
        patch_jump(&mut jumps, 0, 3);
        assert_eq!(jumps[0].off, 2);
    }
}
