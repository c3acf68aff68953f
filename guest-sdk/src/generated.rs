// Bindings generated from `wit/policy.wit`, kept apart from the SDK's own types.
wit_bindgen::generate!({
    world: "datajob-policy",
    path: "wit",
    pub_export_macro: true,
    export_macro_name: "__export_datajob_policy",
    default_bindings_module: "::policyhost_sdk::__private::generated",
    runtime_path: "::policyhost_sdk::__private::wit_bindgen::rt",
});
