//! The scheduling requirements algebra (In, NotIn, Exists, DoesNotExist, Gt, Lt, minValues).
