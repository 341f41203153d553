//! Tests only (Linux): what `/proc/self/maps` says about this process's pages. Apart from
//! the code it checks (the arena, `MmapBackend`, staged code), which all use it.

/// The permissions `/proc/self/maps` shows for the page holding `address`.
pub(crate) fn permissions(address: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let range = fields.next().unwrap_or("");
        let perms = fields.next().unwrap_or("");
        let (lo, hi) = range.split_once('-').unwrap_or(("0", "0"));
        let lo = usize::from_str_radix(lo, 16).unwrap_or(0);
        let hi = usize::from_str_radix(hi, 16).unwrap_or(0);
        if (lo..hi).contains(&address) {
            return perms[..3].to_string();
        }
    }
    panic!("{address:#x} is not mapped");
}
