"""README's "Deploy to AWS": it names every parameter a deployment is asked for, and only
outputs, resources and commands that exist."""

from __future__ import annotations

import re
import tomllib

from template_helpers import REPO_ROOT, load_template

TEMPLATE = load_template()
README = (REPO_ROOT / "README.md").read_text()
DEPLOY = README[
    README.index("## Deploy to AWS\n") : README.index(
        "\n## ", README.index("## Deploy to AWS\n") + 1
    )
]


def test_the_parameter_table_explains_every_parameter_once() -> None:
    rows = re.findall(r"^\| (`.*?`) \|", DEPLOY, re.M)
    named = [name for row in rows for name in re.findall(r"`(\w+)`", row)]
    assert sorted(named) == sorted(TEMPLATE["Parameters"])


def test_the_outputs_and_resources_it_looks_up_exist() -> None:
    outputs = set(re.findall(r"outputs (\w+)\)", DEPLOY)) | set(
        re.findall(r"OutputKey=='(\w+)'", DEPLOY)
    )
    assert outputs, "the walk-through reads no output"
    assert outputs <= set(TEMPLATE["Outputs"]), outputs - set(TEMPLATE["Outputs"])
    resources = set(re.findall(r"--logical-resource-id (\w+)", DEPLOY))
    assert resources == {"CostReportFunction", "AccessLogsBucket"}
    assert resources <= set(TEMPLATE["Resources"])


def test_the_make_targets_and_repositories_it_names_exist() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    for target in re.findall(r"(?:^|`)make (\w[\w-]*)", DEPLOY, re.M):
        assert re.search(rf"^{target}:", makefile, re.M), target
    for family in re.findall(r"fleetcast-(processing|training|inference)", DEPLOY):
        assert (REPO_ROOT / "containers" / family / "Dockerfile").is_file()


def test_every_command_runs_in_samconfigs_region() -> None:
    # Issue 41: the stack went to samconfig's region, the AWS CLI steps to the profile's,
    # and answered "Stack ... does not exist" for anyone whose default is another.
    samconfig = tomllib.loads((REPO_ROOT / "samconfig.toml").read_text())
    regions = {samconfig[env]["global"]["parameters"]["region"] for env in ("default", "prod")}
    (region,) = regions
    # The walk-through exports that region for the AWS CLI (v2 reads AWS_REGION, v1 and
    # boto3 AWS_DEFAULT_REGION) ...
    (export,) = re.findall(r"^export AWS_REGION=.*$", DEPLOY, re.M)
    assert re.findall(r"\b(AWS_REGION|AWS_DEFAULT_REGION)=(\S+)", export) == [
        ("AWS_REGION", region),
        ("AWS_DEFAULT_REGION", region),
    ]
    # ... before any command that would otherwise use the profile's region
    first = min(
        match.start()
        for match in re.finditer(
            r"^(?:\S+=\$\(|\S+\(\) \{ )?(aws |\.venv/bin/fleetcast )", DEPLOY, re.M
        )
    )
    assert DEPLOY.index(export) < first
    # And no command names another region
    assert set(re.findall(r"--region[ =](\S+)", DEPLOY)) <= {region}


def test_the_idle_costs_name_what_the_template_bills_while_idle() -> None:
    # The dev row counts the alarms and the dashboard the template creates ...
    resources = TEMPLATE["Resources"].values()
    alarms = sum(1 for r in resources if r["Type"] == "AWS::CloudWatch::Alarm")
    numbers = {6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    (dev,) = re.findall(r"^\| dev .*$", DEPLOY, re.M)
    assert f"{numbers[alarms]} alarms" in dev
    assert sum(1 for r in resources if r["Type"] == "AWS::CloudWatch::Dashboard") == 1
    assert "dashboard" in dev
    # ... and the prod row prices the endpoint the template creates by default
    (prod,) = re.findall(r"^\| prod .*$", DEPLOY, re.M)
    parameters = TEMPLATE["Parameters"]
    assert parameters["InferenceInstanceType"]["Default"] in prod
    assert f"`InferenceInstanceCount` {parameters['InferenceInstanceCount']['Default']}" in prod


def test_the_runtime_note_quotes_awss_dates_for_the_runtime_the_template_deploys() -> None:
    # Issue 41: the note quotes AWS's Lambda runtimes table for the functions' runtime and
    # says the plan to move. Given the one runtime the functions and their layer are built for
    runtime = TEMPLATE["Globals"]["Function"]["Runtime"]
    resources = TEMPLATE["Resources"].values()
    functions = [r for r in resources if r["Type"] == "AWS::Serverless::Function"]
    layers = [r for r in resources if r["Type"] == "AWS::Serverless::LayerVersion"]
    assert {r["Properties"].get("Runtime", runtime) for r in functions} == {runtime}
    assert {r["Metadata"]["BuildMethod"] for r in layers} == {runtime}
    assert {v for r in layers for v in r["Properties"]["CompatibleRuntimes"]} == {runtime}
    # Then the README's note is about that runtime, with the three dates of AWS's table
    (note,) = re.findall(r"^- \*\*The Lambda runtime\.\*\*.*?(?=^- |^#|\Z)", DEPLOY, re.M | re.S)
    note = " ".join(note.split())
    assert f"built for `{runtime}`" in note
    for stage in ("deprecation date of", "create blocked from", "update blocked from"):
        assert re.search(rf"{stage} \d{{4}}-\d{{2}}-\d{{2}}", note), stage
    # And the plan names a newer runtime to move to
    (target,) = re.findall(r"\*\*The plan:\*\* move to `python3\.(\d+)`", note)
    assert int(target) > int(runtime.removeprefix("python3."))
