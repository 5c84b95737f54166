//! Pushed-down scan filters (NDB's NdbScanFilter): a small tree of comparisons and groups that
//! the data node evaluates against each row before returning it.
//!
//! On the wire a filter is its nodes in pre-order: a tag byte, then per tag
//! - `1` comparison: column u16 · operator u8 (0 `=`, 1 `≠`, 2 `<`, 3 `≤`, 4 `>`, 5 `≥`) · value;
//! - `2` IS NULL / `3` IS NOT NULL: column u16;
//! - `4` group: operator u8 (0 AND, 1 OR, 2 NAND, 3 NOR) · child count u16, then the children.
//!
//! A filter holds at most [`FILTER_NODES_MAX`] nodes nested at most [`FILTER_DEPTH_MAX`] deep, so
//! evaluating one row is bounded work and decoding is bounded recursion.
//!
//! Semantics: a comparison with a NULL column value is false (for every operator, `≠`
//! included); IS NULL / IS NOT NULL test for NULL. Groups combine their children's truth values;
//! an empty AND is true and an empty OR is false. NOT x is NAND(x).

use crate::codec::{DecodeError, Reader, Writer};
use crate::error::NdbError;
use crate::schema::{TableDef, Value};

/// The most nodes a filter may have.
pub const FILTER_NODES_MAX: usize = 256;
/// The deepest a filter may nest groups.
pub const FILTER_DEPTH_MAX: usize = 16;

/// A comparison operator: `column op constant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq = 0,
    Ne = 1,
    Lt = 2,
    Le = 3,
    Gt = 4,
    Ge = 5,
}

/// How a group combines its children.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupOp {
    /// Every child is true.
    And = 0,
    /// Some child is true.
    Or = 1,
    /// Not every child is true (NOT of one child).
    Nand = 2,
    /// No child is true.
    Nor = 3,
}

/// A filter node.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// `column op value`, false when the column is NULL.
    Cmp {
        column: u16,
        op: CmpOp,
        value: Value,
    },
    IsNull(u16),
    IsNotNull(u16),
    Group {
        op: GroupOp,
        children: Vec<Filter>,
    },
}

impl Filter {
    /// AND of `children`.
    pub fn and(children: Vec<Filter>) -> Filter {
        Filter::Group {
            op: GroupOp::And,
            children,
        }
    }
    /// OR of `children`.
    pub fn or(children: Vec<Filter>) -> Filter {
        Filter::Group {
            op: GroupOp::Or,
            children,
        }
    }
    /// NOT `child`.
    #[allow(clippy::should_implement_trait)]
    pub fn not(child: Filter) -> Filter {
        Filter::Group {
            op: GroupOp::Nand,
            children: vec![child],
        }
    }
    /// `column op value`.
    pub fn cmp(column: u16, op: CmpOp, value: Value) -> Filter {
        Filter::Cmp { column, op, value }
    }

    /// Nodes in the tree.
    pub fn node_count(&self) -> usize {
        match self {
            Filter::Group { children, .. } => {
                1 + children.iter().map(Filter::node_count).sum::<usize>()
            }
            _ => 1,
        }
    }

    /// How deep groups nest (a leaf is depth 1).
    pub fn depth(&self) -> usize {
        match self {
            Filter::Group { children, .. } => {
                1 + children.iter().map(Filter::depth).max().unwrap_or(0)
            }
            _ => 1,
        }
    }

    /// Every column the filter reads.
    pub fn columns(&self, out: &mut Vec<u16>) {
        match self {
            Filter::Cmp { column, .. } | Filter::IsNull(column) | Filter::IsNotNull(column) => {
                out.push(*column)
            }
            Filter::Group { children, .. } => children.iter().for_each(|c| c.columns(out)),
        }
    }

    /// Evaluates the filter against a row (columns in table order). A column the row lacks is
    /// treated as NULL; the data node checks columns against the table before it evaluates.
    pub fn matches(&self, row: &[Value]) -> bool {
        match self {
            Filter::Cmp { column, op, value } => match row.get(usize::from(*column)) {
                None | Some(Value::Null) => false,
                Some(v) => compare(v, *op, value),
            },
            Filter::IsNull(column) => {
                matches!(row.get(usize::from(*column)), None | Some(Value::Null))
            }
            Filter::IsNotNull(column) => {
                !matches!(row.get(usize::from(*column)), None | Some(Value::Null))
            }
            Filter::Group { op, children } => match op {
                GroupOp::And => children.iter().all(|c| c.matches(row)),
                GroupOp::Or => children.iter().any(|c| c.matches(row)),
                GroupOp::Nand => !children.iter().all(|c| c.matches(row)),
                GroupOp::Nor => !children.iter().any(|c| c.matches(row)),
            },
        }
    }

    pub fn encode(&self, w: &mut Writer<'_>) {
        match self {
            Filter::Cmp { column, op, value } => {
                w.u8(1).u16(*column).u8(*op as u8);
                value.encode(w);
            }
            Filter::IsNull(column) => {
                w.u8(2).u16(*column);
            }
            Filter::IsNotNull(column) => {
                w.u8(3).u16(*column);
            }
            Filter::Group { op, children } => {
                w.u8(4).u8(*op as u8).u16(children.len() as u16);
                children.iter().for_each(|c| c.encode(w));
            }
        }
    }

    /// Decodes a filter, refusing more than [`FILTER_NODES_MAX`] nodes or deeper nesting than
    /// [`FILTER_DEPTH_MAX`].
    pub fn decode(r: &mut Reader<'_>) -> Result<Filter, DecodeError> {
        let mut nodes = 0;
        decode_node(r, 1, &mut nodes)
    }
}

fn decode_node(r: &mut Reader<'_>, depth: usize, nodes: &mut usize) -> Result<Filter, DecodeError> {
    *nodes += 1;
    if *nodes > FILTER_NODES_MAX {
        return Err(r.error(format!("filter has more than {FILTER_NODES_MAX} nodes")));
    }
    if depth > FILTER_DEPTH_MAX {
        return Err(r.error(format!("filter nests deeper than {FILTER_DEPTH_MAX}")));
    }
    Ok(match r.u8()? {
        1 => {
            let column = r.u16()?;
            let op = match r.u8()? {
                0 => CmpOp::Eq,
                1 => CmpOp::Ne,
                2 => CmpOp::Lt,
                3 => CmpOp::Le,
                4 => CmpOp::Gt,
                5 => CmpOp::Ge,
                o => return Err(r.error(format!("unknown comparison {o}"))),
            };
            Filter::Cmp {
                column,
                op,
                value: Value::decode(r)?,
            }
        }
        2 => Filter::IsNull(r.u16()?),
        3 => Filter::IsNotNull(r.u16()?),
        4 => {
            let op = match r.u8()? {
                0 => GroupOp::And,
                1 => GroupOp::Or,
                2 => GroupOp::Nand,
                3 => GroupOp::Nor,
                o => return Err(r.error(format!("unknown group operator {o}"))),
            };
            let count = usize::from(r.u16()?);
            if count > FILTER_NODES_MAX {
                return Err(r.error(format!("group of {count} children")));
            }
            let mut children = Vec::with_capacity(count);
            for _ in 0..count {
                children.push(decode_node(r, depth + 1, nodes)?);
            }
            Filter::Group { op, children }
        }
        t => return Err(r.error(format!("unknown filter node tag {t}"))),
    })
}

/// Checks a filter against a table: every column exists and every constant fits its column's
/// type (4004 and 4209 otherwise), so evaluation never meets a type mismatch; no comparison
/// names a BLOB or TEXT column, whose rows hold only heads (4264).
pub fn check_filter(def: &TableDef, filter: &Filter) -> Result<(), NdbError> {
    match filter {
        Filter::Cmp { column, value, .. } => {
            let Some(cdef) = def.columns.get(usize::from(*column)) else {
                return Err(NdbError::with_detail(
                    4004,
                    format!("filter names column {column} of table {}", def.name),
                ));
            };
            if crate::blob::size_of(cdef.column_type).is_some() {
                return Err(NdbError::with_detail(
                    4264,
                    format!(
                        "a filter compares column {} ({}); \
                         only IS NULL and IS NOT NULL may name it",
                        cdef.name, cdef.column_type
                    ),
                ));
            }
            if *value == Value::Null || !value.fits(cdef.column_type) {
                return Err(NdbError::with_detail(
                    4209,
                    format!(
                        "filter compares column {} ({}) with {value:?}",
                        cdef.name, cdef.column_type
                    ),
                ));
            }
            Ok(())
        }
        Filter::IsNull(column) | Filter::IsNotNull(column) => {
            if def.columns.get(usize::from(*column)).is_none() {
                return Err(NdbError::with_detail(
                    4004,
                    format!("filter names column {column} of table {}", def.name),
                ));
            }
            Ok(())
        }
        Filter::Group { children, .. } => children.iter().try_for_each(|c| check_filter(def, c)),
    }
}

/// `v op constant` for two non-NULL values of the same type; values of different types (the
/// data node refuses such filters) and NaN compare false.
fn compare(v: &Value, op: CmpOp, constant: &Value) -> bool {
    let Some(ordering) = value_cmp(v, constant) else {
        return false;
    };
    use std::cmp::Ordering::*;
    match op {
        CmpOp::Eq => ordering == Equal,
        CmpOp::Ne => ordering != Equal,
        CmpOp::Lt => ordering == Less,
        CmpOp::Le => ordering != Greater,
        CmpOp::Gt => ordering == Greater,
        CmpOp::Ge => ordering != Less,
    }
}

/// Orders two values of the same type (text and bytes by their bytes); `None` for different
/// types, NULLs or NaN.
pub fn value_cmp(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Int32(x), Value::Int32(y)) => Some(x.cmp(y)),
        (Value::UInt32(x), Value::UInt32(y)) => Some(x.cmp(y)),
        (Value::Int64(x), Value::Int64(y)) => Some(x.cmp(y)),
        (Value::UInt64(x), Value::UInt64(y)) => Some(x.cmp(y)),
        (Value::Float64(x), Value::Float64(y)) => x.partial_cmp(y),
        (Value::Varchar(x), Value::Varchar(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (Value::Varbinary(x), Value::Varbinary(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Vec<Value> {
        vec![
            Value::UInt32(5),
            Value::Null,
            Value::Varchar("abc".into()),
            Value::Float64(f64::NAN),
        ]
    }

    /// One case: a filter and whether it matches [`row`].
    fn check(filter: Filter, expected: bool) {
        assert_eq!(filter.matches(&row()), expected, "{filter:?}");
        let mut buf = Vec::new();
        filter.encode(&mut Writer::new(&mut buf));
        let mut r = Reader::new(&buf, "filter");
        let decoded = Filter::decode(&mut r).expect("decode");
        r.finish().expect("no trailing bytes");
        assert_eq!(decoded.matches(&row()), expected);
    }

    #[test]
    fn comparisons() {
        let c = |op, v| Filter::cmp(0, op, Value::UInt32(v));
        check(c(CmpOp::Eq, 5), true);
        check(c(CmpOp::Eq, 6), false);
        check(c(CmpOp::Ne, 6), true);
        check(c(CmpOp::Lt, 6), true);
        check(c(CmpOp::Lt, 5), false);
        check(c(CmpOp::Le, 5), true);
        check(c(CmpOp::Gt, 4), true);
        check(c(CmpOp::Gt, 5), false);
        check(c(CmpOp::Ge, 5), true);
        check(
            Filter::cmp(2, CmpOp::Lt, Value::Varchar("abd".into())),
            true,
        );
        check(Filter::cmp(2, CmpOp::Gt, Value::Varchar("ab".into())), true);
    }

    #[test]
    fn nulls_and_nan_compare_false() {
        check(Filter::cmp(1, CmpOp::Eq, Value::UInt32(5)), false);
        check(Filter::cmp(1, CmpOp::Ne, Value::UInt32(5)), false);
        check(Filter::cmp(3, CmpOp::Eq, Value::Float64(f64::NAN)), false);
        check(Filter::IsNull(1), true);
        check(Filter::IsNotNull(1), false);
        check(Filter::IsNull(0), false);
        check(Filter::cmp(0, CmpOp::Eq, Value::Int32(5)), false);
    }

    #[test]
    fn groups() {
        let t = || Filter::IsNull(1);
        let f = || Filter::IsNull(0);
        check(Filter::and(vec![]), true);
        check(Filter::or(vec![]), false);
        check(Filter::and(vec![t(), t()]), true);
        check(Filter::and(vec![t(), f()]), false);
        check(Filter::or(vec![f(), t()]), true);
        check(Filter::not(f()), true);
        check(Filter::not(Filter::or(vec![f(), t()])), false);
        check(
            Filter::Group {
                op: GroupOp::Nor,
                children: vec![f(), f()],
            },
            true,
        );
    }

    #[test]
    fn limits_are_enforced_when_decoding() {
        let mut deep = Filter::IsNull(0);
        for _ in 0..FILTER_DEPTH_MAX {
            deep = Filter::not(deep);
        }
        let mut buf = Vec::new();
        deep.encode(&mut Writer::new(&mut buf));
        assert!(Filter::decode(&mut Reader::new(&buf, "filter")).is_err());
        let wide = Filter::and((0..FILTER_NODES_MAX as u16).map(Filter::IsNull).collect());
        buf.clear();
        wide.encode(&mut Writer::new(&mut buf));
        assert!(Filter::decode(&mut Reader::new(&buf, "filter")).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = Filter::decode(&mut Reader::new(&bytes, "filter"));
        }
    }
}
