//! One module per controller.
