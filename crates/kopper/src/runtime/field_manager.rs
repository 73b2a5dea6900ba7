//! Field managers: each controller writes under its own name, `<--field-manager>/<controller>`
//! (`kopper/namespace-access`), so `managedFields` tell which controller owns a field.

/// The field manager `controller` writes with.
pub fn for_controller(base: &str, controller: &str) -> String {
    format!("{base}/{controller}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_controller_writes_under_its_own_name() {
        assert_eq!(for_controller("kopper", "bucket"), "kopper/bucket");
    }
}
