//! Selectors and sort-by on the fixture pods (mixed phases, labels, nodes, IPs): which pods each
//! query picks and in what order.

mod support;

use podlab_print::{sort_by, FieldSelector, LabelSelector};
use serde_json::Value;

fn names(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn select_labels(selector: &str) -> Vec<String> {
    let s = LabelSelector::parse(selector).unwrap();
    let picked: Vec<Value> = support::pods()
        .into_iter()
        .filter(|p| s.matches_object(p))
        .collect();
    names(&picked)
}

fn select_fields(selector: &str) -> Vec<String> {
    let s = FieldSelector::parse(selector).unwrap();
    s.validate_for("Pod").unwrap();
    let picked: Vec<Value> = support::pods()
        .into_iter()
        .filter(|p| s.matches(p))
        .collect();
    names(&picked)
}

#[test]
fn label_selectors_pick_the_right_pods() {
    assert_eq!(
        select_labels("app=web"),
        ["web-7d4b9c-abcde", "web-7d4b9c-fghij"]
    );
    assert_eq!(
        select_labels("paas.sogou.com/app=shop"),
        ["web-7d4b9c-abcde", "web-7d4b9c-fghij", "crash"]
    );
    assert_eq!(
        select_labels("paas.sogou.com/app in (shop,billing),tier!=frontend"),
        ["db-0", "crash"]
    );
    assert_eq!(
        select_labels("!paas.sogou.com/app"),
        ["backup-28012345", "bare"]
    );
    assert_eq!(
        select_labels("tier"),
        ["web-7d4b9c-abcde", "web-7d4b9c-fghij", "db-0"]
    );
    assert_eq!(
        select_labels("app notin (web,db)"),
        ["backup-28012345", "crash", "bare"]
    );
    assert_eq!(select_labels("app==db,tier==backend"), ["db-0"]);
    assert_eq!(select_labels("job-name"), ["backup-28012345"]);
    assert_eq!(select_labels("").len(), 6);
}

#[test]
fn the_replicaset_selector_picks_its_pods() {
    let rs = support::replicasets().remove(0);
    let selector = LabelSelector::from_k8s(&rs["spec"]["selector"]).unwrap();
    let picked: Vec<Value> = support::pods()
        .into_iter()
        .filter(|p| selector.matches_object(p))
        .collect();
    assert_eq!(names(&picked), ["web-7d4b9c-abcde", "web-7d4b9c-fghij"]);
    assert_eq!(selector.to_string(), "app=web,tier in (edge,frontend)");
}

#[test]
fn field_selectors_pick_the_right_pods() {
    assert_eq!(
        select_fields("status.phase=Running"),
        ["web-7d4b9c-abcde", "db-0"]
    );
    assert_eq!(
        select_fields("status.phase!=Running,status.phase!=Pending"),
        ["backup-28012345", "crash"]
    );
    assert_eq!(
        select_fields("spec.nodeName=node-b"),
        ["db-0", "backup-28012345"]
    );
    assert_eq!(select_fields("spec.nodeName="), ["bare"]);
    assert_eq!(select_fields("status.podIP=10.88.0.7"), ["db-0"]);
    assert_eq!(select_fields("spec.restartPolicy==Never"), ["crash"]);
    assert_eq!(
        select_fields("metadata.name=db-0,metadata.namespace=default"),
        ["db-0"]
    );
    assert_eq!(
        FieldSelector::parse("status.hostIP=1.2.3.4")
            .unwrap()
            .validate_for("Pod")
            .unwrap_err()
            .to_string(),
        "field label not supported: status.hostIP"
    );
}

#[test]
fn bad_selectors_are_refused_with_kubectl_messages() {
    assert_eq!(
        LabelSelector::parse("app in (web").unwrap_err().to_string(),
        "unable to parse requirement: found '', expected: ',' or ')'"
    );
    assert_eq!(
        LabelSelector::parse("app=web,,tier=x")
            .unwrap_err()
            .to_string(),
        "found ',', expected: identifier after ','"
    );
    assert_eq!(
        FieldSelector::parse("status.phase")
            .unwrap_err()
            .to_string(),
        "invalid selector: 'status.phase'; can't understand 'status.phase'"
    );
}

#[test]
fn sort_by_orders_the_fixture_pods() {
    let mut pods = support::pods();
    sort_by(&mut pods, ".metadata.creationTimestamp").unwrap();
    assert_eq!(
        names(&pods),
        [
            "db-0",
            "backup-28012345",
            "web-7d4b9c-abcde",
            "web-7d4b9c-fghij",
            "crash",
            "bare"
        ]
    );
    sort_by(&mut pods, "{.status.containerStatuses[0].restartCount}").unwrap();
    let first_restarts: Vec<Option<i64>> = pods
        .iter()
        .map(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64())
        .collect();
    assert_eq!(
        first_restarts[0], None,
        "a pod without the field sorts first"
    );
    assert!(first_restarts[1..].windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(
        sort_by(&mut pods, ".spec.nope").unwrap_err().to_string(),
        "couldn't find any field with path \"{.spec.nope}\" in the list of objects"
    );
}
