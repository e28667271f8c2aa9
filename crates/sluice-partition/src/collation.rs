//! The charset and collation model Sluice shares: latin1 (MariaDB's cp1252) both ways, the
//! sort orders of latin1_swedish_ci and the `general_ci` collations, and how a column's
//! strings compare.

use crate::cannot_place;
use sluice_types::partition::PartitionError;
use sluice_types::{ColumnDef, ColumnType};
use std::cmp::Ordering;

/// MariaDB latin1 bytes 0x80-0x9F as Unicode (cp1252, with the five undefined bytes mapped to
/// the C1 controls), as the server converts them.
pub(crate) const LATIN1_80_9F: [u16; 32] = [
    0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039,
    0x0152, 0x008D, 0x017D, 0x008F, 0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
    0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
];

/// The sort order of latin1_swedish_ci (byte → weight), as the server reports it with
/// `WEIGHT_STRING`.
pub(crate) const LATIN1_SWEDISH_CI: [u8; 256] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F,
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B, 0x2C, 0x2D, 0x2E, 0x2F,
    0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x3B, 0x3C, 0x3D, 0x3E, 0x3F,
    0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x4F,
    0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x5B, 0x5C, 0x5D, 0x5E, 0x5F,
    0x60, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x4F,
    0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x7B, 0x7C, 0x7D, 0x7E, 0x7F,
    0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8B, 0x8C, 0x8D, 0x8E, 0x8F,
    0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F,
    0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF,
    0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xBB, 0xBC, 0xBD, 0xBE, 0xBF,
    0x41, 0x41, 0x41, 0x41, 0x5C, 0x5B, 0x5C, 0x43, 0x45, 0x45, 0x45, 0x45, 0x49, 0x49, 0x49, 0x49,
    0x44, 0x4E, 0x4F, 0x4F, 0x4F, 0x4F, 0x5D, 0xD7, 0xD8, 0x55, 0x55, 0x55, 0x59, 0x59, 0xDE, 0xDF,
    0x41, 0x41, 0x41, 0x41, 0x5C, 0x5B, 0x5C, 0x43, 0x45, 0x45, 0x45, 0x45, 0x49, 0x49, 0x49, 0x49,
    0x44, 0x4E, 0x4F, 0x4F, 0x4F, 0x4F, 0x5D, 0xF7, 0xD8, 0x55, 0x55, 0x55, 0x59, 0x59, 0xDE, 0xFF,
];

/// utf8mb4_general_ci weights of U+0080…U+017F (Latin-1 Supplement and Latin Extended-A), as
/// the server reports them with `WEIGHT_STRING`; below U+0080 the weight is the ASCII upper case.
pub(crate) const GENERAL_CI_80_17F: [u16; 256] = [
    0x0080, 0x0081, 0x0082, 0x0083, 0x0084, 0x0085, 0x0086, 0x0087, 0x0088, 0x0089, 0x008A, 0x008B,
    0x008C, 0x008D, 0x008E, 0x008F, 0x0090, 0x0091, 0x0092, 0x0093, 0x0094, 0x0095, 0x0096, 0x0097,
    0x0098, 0x0099, 0x009A, 0x009B, 0x009C, 0x009D, 0x009E, 0x009F, 0x00A0, 0x00A1, 0x00A2, 0x00A3,
    0x00A4, 0x00A5, 0x00A6, 0x00A7, 0x00A8, 0x00A9, 0x00AA, 0x00AB, 0x00AC, 0x00AD, 0x00AE, 0x00AF,
    0x00B0, 0x00B1, 0x00B2, 0x00B3, 0x00B4, 0x039C, 0x00B6, 0x00B7, 0x00B8, 0x00B9, 0x00BA, 0x00BB,
    0x00BC, 0x00BD, 0x00BE, 0x00BF, 0x0041, 0x0041, 0x0041, 0x0041, 0x0041, 0x0041, 0x00C6, 0x0043,
    0x0045, 0x0045, 0x0045, 0x0045, 0x0049, 0x0049, 0x0049, 0x0049, 0x00D0, 0x004E, 0x004F, 0x004F,
    0x004F, 0x004F, 0x004F, 0x00D7, 0x00D8, 0x0055, 0x0055, 0x0055, 0x0055, 0x0059, 0x00DE, 0x0053,
    0x0041, 0x0041, 0x0041, 0x0041, 0x0041, 0x0041, 0x00C6, 0x0043, 0x0045, 0x0045, 0x0045, 0x0045,
    0x0049, 0x0049, 0x0049, 0x0049, 0x00D0, 0x004E, 0x004F, 0x004F, 0x004F, 0x004F, 0x004F, 0x00F7,
    0x00D8, 0x0055, 0x0055, 0x0055, 0x0055, 0x0059, 0x00DE, 0x0059, 0x0041, 0x0041, 0x0041, 0x0041,
    0x0041, 0x0041, 0x0043, 0x0043, 0x0043, 0x0043, 0x0043, 0x0043, 0x0043, 0x0043, 0x0044, 0x0044,
    0x0110, 0x0110, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045, 0x0045,
    0x0047, 0x0047, 0x0047, 0x0047, 0x0047, 0x0047, 0x0047, 0x0047, 0x0048, 0x0048, 0x0126, 0x0126,
    0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0049, 0x0132, 0x0132,
    0x004A, 0x004A, 0x004B, 0x004B, 0x0138, 0x004C, 0x004C, 0x004C, 0x004C, 0x004C, 0x004C, 0x013F,
    0x013F, 0x0141, 0x0141, 0x004E, 0x004E, 0x004E, 0x004E, 0x004E, 0x004E, 0x0149, 0x014A, 0x014A,
    0x004F, 0x004F, 0x004F, 0x004F, 0x004F, 0x004F, 0x0152, 0x0152, 0x0052, 0x0052, 0x0052, 0x0052,
    0x0052, 0x0052, 0x0053, 0x0053, 0x0053, 0x0053, 0x0053, 0x0053, 0x0053, 0x0053, 0x0054, 0x0054,
    0x0054, 0x0054, 0x0166, 0x0166, 0x0055, 0x0055, 0x0055, 0x0055, 0x0055, 0x0055, 0x0055, 0x0055,
    0x0055, 0x0055, 0x0055, 0x0055, 0x0057, 0x0057, 0x0059, 0x0059, 0x0059, 0x005A, 0x005A, 0x005A,
    0x005A, 0x005A, 0x005A, 0x0053,
];

/// MariaDB's compiled-in default collation of each charset (before 11.2; 11.2+ may map some
/// to `uca1400_*`, see `@@character_set_collations`): capture's charset resolution falls back on
/// it, and a partition bound of a column with only a charset compares by it where that default
/// never changed.
pub const BUILTIN_DEFAULTS: &[(&str, &str)] = &[
    ("armscii8", "armscii8_general_ci"),
    ("ascii", "ascii_general_ci"),
    ("big5", "big5_chinese_ci"),
    ("binary", "binary"),
    ("cp1250", "cp1250_general_ci"),
    ("cp1251", "cp1251_general_ci"),
    ("cp1256", "cp1256_general_ci"),
    ("cp1257", "cp1257_general_ci"),
    ("cp850", "cp850_general_ci"),
    ("cp852", "cp852_general_ci"),
    ("cp866", "cp866_general_ci"),
    ("cp932", "cp932_japanese_ci"),
    ("dec8", "dec8_swedish_ci"),
    ("eucjpms", "eucjpms_japanese_ci"),
    ("euckr", "euckr_korean_ci"),
    ("gb2312", "gb2312_chinese_ci"),
    ("gbk", "gbk_chinese_ci"),
    ("geostd8", "geostd8_general_ci"),
    ("greek", "greek_general_ci"),
    ("hebrew", "hebrew_general_ci"),
    ("hp8", "hp8_english_ci"),
    ("keybcs2", "keybcs2_general_ci"),
    ("koi8r", "koi8r_general_ci"),
    ("koi8u", "koi8u_general_ci"),
    ("latin1", "latin1_swedish_ci"),
    ("latin2", "latin2_general_ci"),
    ("latin5", "latin5_turkish_ci"),
    ("latin7", "latin7_general_ci"),
    ("macce", "macce_general_ci"),
    ("macroman", "macroman_general_ci"),
    ("sjis", "sjis_japanese_ci"),
    ("swe7", "swe7_swedish_ci"),
    ("tis620", "tis620_thai_ci"),
    ("ucs2", "ucs2_general_ci"),
    ("ujis", "ujis_japanese_ci"),
    ("utf16", "utf16_general_ci"),
    ("utf16le", "utf16le_general_ci"),
    ("utf32", "utf32_general_ci"),
    ("utf8mb3", "utf8mb3_general_ci"),
    ("utf8mb4", "utf8mb4_general_ci"),
];

/// The default collation of `charset` (lower case) in [`BUILTIN_DEFAULTS`].
pub fn builtin_default_collation(charset: &str) -> Option<&'static str> {
    BUILTIN_DEFAULTS
        .iter()
        .find(|(c, _)| *c == charset)
        .map(|(_, d)| *d)
}

/// The character a latin1 byte stands for (MariaDB's latin1 is cp1252, with the five
/// undefined bytes 0x81, 0x8D, 0x8F, 0x90, 0x9D mapped to the C1 controls).
pub fn latin1_char(b: u8) -> char {
    match b {
        0x80..=0x9f => {
            char::from_u32(u32::from(LATIN1_80_9F[usize::from(b - 0x80)])).unwrap_or('\u{fffd}')
        }
        _ => char::from(b),
    }
}

/// The latin1 byte of a character (MariaDB's latin1 is cp1252 in 0x80-0x9F).
pub(crate) fn latin1_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if u < 0x80 || (0xA0..=0xFF).contains(&u) {
        return Some(u as u8);
    }
    LATIN1_80_9F
        .iter()
        .position(|&x| u32::from(x) == u)
        .map(|i| 0x80 + i as u8)
}

pub(crate) fn latin1_bytes(col: &ColumnDef, s: &str) -> Result<Vec<u8>, PartitionError> {
    s.chars()
        .map(|c| {
            latin1_byte(c).ok_or_else(|| {
                PartitionError(format!(
                    "value of latin1 column `{}` has {c:?}, not a latin1 character",
                    col.name
                ))
            })
        })
        .collect()
}

/// How a column's strings compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coll {
    /// `binary`: bytes, no padding.
    Binary,
    /// `*_bin`: code points (latin1: its bytes); trailing spaces ignored unless NO PAD.
    Bin { latin1: bool, pad: bool },
    /// latin1_swedish_ci.
    Latin1SwedishCi { pad: bool },
    /// `*_general_ci` of the Unicode charsets and ascii.
    GeneralCi { pad: bool },
    /// UCA `_ci` collations without language tailoring (unicode_ci, unicode_520_ci,
    /// uca1400_ai_ci, uca1400_as_ci): known for ASCII letters, digits and space only.
    UcaCi { pad: bool },
    /// Not recorded in the schema: a comparison must come out the same under every collation
    /// the column may have.
    Unknown,
}

impl Coll {
    /// The weight of `c` (None: not known to Sluice).
    pub(crate) fn weight(self, c: char) -> Option<u32> {
        let u = c as u32;
        match self {
            Coll::Binary | Coll::Unknown => None,
            Coll::Bin { latin1: true, .. } => latin1_byte(c).map(u32::from),
            Coll::Bin { latin1: false, .. } => Some(u),
            Coll::Latin1SwedishCi { .. } => {
                latin1_byte(c).map(|b| u32::from(LATIN1_SWEDISH_CI[b as usize]))
            }
            Coll::GeneralCi { .. } => match u {
                0..=0x7F => Some(u32::from((u as u8).to_ascii_uppercase())),
                0x80..=0x17F => Some(u32::from(GENERAL_CI_80_17F[(u - 0x80) as usize])),
                _ => None,
            },
            Coll::UcaCi { .. } => match c {
                ' ' => Some(1),
                '0'..='9' => Some(10 + (u - '0' as u32)),
                'a'..='z' => Some(100 + (u - 'a' as u32)),
                'A'..='Z' => Some(100 + (u - 'A' as u32)),
                _ => None,
            },
        }
    }

    pub(crate) fn pad(self) -> bool {
        match self {
            Coll::Binary | Coll::Unknown => false,
            Coll::Bin { pad, .. }
            | Coll::Latin1SwedishCi { pad }
            | Coll::GeneralCi { pad }
            | Coll::UcaCi { pad } => pad,
        }
    }
}

/// The collation of a string column, from its schema.
pub(crate) fn collation_of(col: &ColumnDef) -> Result<Coll, PartitionError> {
    if matches!(
        col.ty,
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob
    ) {
        return Ok(Coll::Binary);
    }
    let name = match (&col.collation, &col.charset) {
        (Some(c), _) => c.to_ascii_lowercase(),
        // Only charsets whose default collation never changed (11.2+ moved others to UCA).
        (None, Some(cs)) => match cs.to_ascii_lowercase().as_str() {
            "utf8" => "utf8mb3_general_ci".to_string(),
            cs @ ("latin1" | "ascii" | "binary" | "utf8mb3") => {
                match builtin_default_collation(cs) {
                    Some(c) => c.to_string(),
                    None => return Ok(Coll::Unknown),
                }
            }
            _ => return Ok(Coll::Unknown),
        },
        (None, None) => return Ok(Coll::Unknown),
    };
    if name == "binary" {
        return Ok(Coll::Binary);
    }
    let (cs, rest) = name.split_once('_').unwrap_or((name.as_str(), ""));
    let pad = !rest.contains("nopad");
    let unicode = matches!(
        cs,
        "utf8mb4" | "utf8mb3" | "utf8" | "ucs2" | "utf16" | "utf16le" | "utf32"
    );
    Ok(match rest.replace("nopad_", "").as_str() {
        "bin" => Coll::Bin {
            latin1: cs == "latin1",
            pad,
        },
        "swedish_ci" if cs == "latin1" => Coll::Latin1SwedishCi { pad },
        "general_ci" if unicode || cs == "ascii" => Coll::GeneralCi { pad },
        "unicode_ci" | "unicode_520_ci" | "uca1400_ai_ci" | "uca1400_as_ci" if unicode => {
            Coll::UcaCi { pad }
        }
        _ => {
            return cannot_place(format!(
                "collation {name} of column `{}` is not supported by Sluice for partition bounds",
                col.name
            ))
        }
    })
}

/// Compares two strings by per-character weights, the shorter padded with spaces when the
/// collation pads. Identical characters compare equal whatever their weight; a differing
/// character without a known weight is returned as the error.
pub(crate) fn cmp_weights(a: &str, b: &str, coll: Coll) -> Result<Ordering, char> {
    let pad = coll.pad();
    let (mut ia, mut ib) = (a.chars(), b.chars());
    loop {
        let (ca, cb) = match (ia.next(), ib.next()) {
            (None, None) => return Ok(Ordering::Equal),
            (Some(x), Some(y)) => (x, y),
            (Some(x), None) if pad => (x, ' '),
            (None, Some(y)) if pad => (' ', y),
            (Some(_), None) => return Ok(Ordering::Greater),
            (None, Some(_)) => return Ok(Ordering::Less),
        };
        if ca == cb {
            continue;
        }
        let wa = coll.weight(ca).ok_or(ca)?;
        let wb = coll.weight(cb).ok_or(cb)?;
        match wa.cmp(&wb) {
            Ordering::Equal => {}
            o => return Ok(o),
        }
    }
}

pub(crate) fn cmp_text(col: &ColumnDef, a: &str, b: &str) -> Result<Ordering, PartitionError> {
    let coll = collation_of(col)?;
    let unknown = |c: char, name: &str| {
        cannot_place(format!(
            "comparing {a:?} with partition bound {b:?} of column `{}` depends on the {name} weight of {c:?} (U+{:04X}), which Sluice does not know",
            col.name, c as u32
        ))
    };
    match coll {
        Coll::Binary => Ok(a.as_bytes().cmp(b.as_bytes())),
        Coll::Unknown => {
            // The schema does not say: every collation the column may have must agree.
            let candidates = [
                Coll::Bin {
                    latin1: false,
                    pad: true,
                },
                Coll::GeneralCi { pad: true },
                Coll::UcaCi { pad: true },
            ];
            let mut result = None;
            for c in candidates {
                match cmp_weights(a, b, c) {
                    Ok(o) if result.is_none() || result == Some(o) => result = Some(o),
                    _ => {
                        return cannot_place(format!(
                            "comparing {a:?} with partition bound {b:?} depends on the collation of column `{}`, which the schema does not record",
                            col.name
                        ))
                    }
                }
            }
            Ok(result.unwrap_or(Ordering::Equal))
        }
        c => cmp_weights(a, b, c).or_else(|ch| {
            let name = col.collation.clone().unwrap_or_else(|| format!("{c:?}"));
            unknown(ch, &name)
        }),
    }
}
