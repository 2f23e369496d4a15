//! The values a running template handles, with the distinctions Go's reflection makes visible:
//! a value read out of a map or slice has the static type `interface {}` (and may be a nil
//! interface), a value that went through a pipeline is concrete, and "no value" (a missing map
//! key) is different from nil.

use crate::golang::fmt::{Arg, IntType};
use crate::golang::Data;

/// A nil `interface{}` to point at.
pub(crate) static NULL: Data = Data::Null;

#[derive(Debug, Clone)]
pub(crate) enum Val<'a> {
    /// The zero `reflect.Value`: a missing key, `<no value>`.
    Invalid,
    /// An element of a map or slice, typed `interface {}`; `&NULL` is a nil interface.
    Iface(&'a Data),
    /// A concrete value of the data (never `Data::Null`).
    Data(&'a Data),
    Bool(bool),
    Int(i64, IntType),
    Float(f64),
    Complex(f64, f64),
    Str(String),
    /// A `[]interface {}` made by `slice`.
    Slice(&'a [Data]),
}

impl<'a> Val<'a> {
    pub(crate) fn nil_iface() -> Val<'a> {
        Val::Iface(&NULL)
    }

    /// `reflect.Value.Type().String()`.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Val::Invalid => "<invalid reflect.Value>",
            Val::Iface(_) => "interface {}",
            Val::Data(d) => d.type_name(),
            Val::Bool(_) => "bool",
            Val::Int(_, t) => match t {
                IntType::Int => "int",
                IntType::Int64 => "int64",
                IntType::Uint8 => "uint8",
            },
            Val::Float(_) => "float64",
            Val::Complex(..) => "complex128",
            Val::Str(_) => "string",
            Val::Slice(_) => "[]interface {}",
        }
    }

    pub(crate) fn is_valid(&self) -> bool {
        !matches!(self, Val::Invalid)
    }

    /// Go's `indirectInterface`: the concrete value inside an interface, or no value for nil.
    pub(crate) fn elem(self) -> Val<'a> {
        match self {
            Val::Iface(Data::Null) => Val::Invalid,
            Val::Iface(d) => Val::Data(d),
            other => other,
        }
    }

    /// Go's `indirect`: `(value, true)` for a nil interface.
    pub(crate) fn indirect(self) -> (Val<'a>, bool) {
        match self {
            Val::Iface(Data::Null) => (self, true),
            Val::Iface(d) => (Val::Data(d), false),
            other => (other, false),
        }
    }

    /// How `fmt` sees the value passed as an `interface{}` argument.
    pub(crate) fn as_arg(&self) -> Arg<'_> {
        match self {
            Val::Invalid => Arg::Nil,
            Val::Iface(d) | Val::Data(d) => Arg::from_data(d),
            Val::Bool(b) => Arg::Bool(*b),
            Val::Int(i, t) => Arg::Int(*i, *t),
            Val::Float(f) => Arg::Float(*f),
            Val::Complex(r, i) => Arg::Complex(*r, *i),
            Val::Str(s) => Arg::Str(s),
            Val::Slice(items) => Arg::List(items),
        }
    }

    /// Length for `len`, truthiness and ranges: maps, lists and strings (bytes).
    pub(crate) fn length(&self) -> Option<usize> {
        match self {
            Val::Data(Data::Map(m)) => Some(m.len()),
            Val::Data(Data::List(l)) => Some(l.len()),
            Val::Data(Data::Str(s)) => Some(s.len()),
            Val::Str(s) => Some(s.len()),
            Val::Slice(l) => Some(l.len()),
            _ => None,
        }
    }

    /// The elements of a list (a `[]interface {}`).
    pub(crate) fn as_list(&self) -> Option<&'a [Data]> {
        match self {
            Val::Data(Data::List(l)) => Some(l.as_slice()),
            Val::Slice(l) => Some(l),
            _ => None,
        }
    }

    /// An integer of any integer type.
    pub(crate) fn as_int(&self) -> Option<i64> {
        match self {
            Val::Int(i, _) | Val::Data(Data::Int(i)) => Some(*i),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Val::Data(Data::Str(s)) => Some(s),
            Val::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Go's `isTrue` on a concrete value: `(truth, ok)`.
pub(crate) fn is_true(v: &Val) -> (bool, bool) {
    match v {
        Val::Invalid => (false, true),
        Val::Iface(Data::Null) => (false, true),
        Val::Bool(b) | Val::Data(Data::Bool(b)) => (*b, true),
        Val::Int(i, _) | Val::Data(Data::Int(i)) => (*i != 0, true),
        Val::Float(f) | Val::Data(Data::Float(f)) => (*f != 0.0, true),
        Val::Complex(r, i) => (*r != 0.0 || *i != 0.0, true),
        Val::Iface(_) => (true, true),
        other => (other.length().unwrap_or(0) > 0, true),
    }
}

/// Go's `truth`: `isTrue(indirectInterface(v))`.
pub(crate) fn truth(v: &Val) -> bool {
    is_true(&v.clone().elem()).0
}
