#!/usr/bin/env python3
"""Checks the documents test_json_constraint generated under JSON constraints: each line of every
json_constraint_*.jsonl in the given directory holds a schema and a document; the document must
parse as JSON and validate against the schema (python3-jsonschema, the validator of the schema's
own draft, 2020-12 when it names none). Prints the count per file; exits 1 on any failure, or if
a file holds fewer documents than expected. A missing file (its test case was skipped, ../shared
being absent) makes the test skipped (exit 77), or failed when CI=true."""
import json
import os
import pathlib
import sys

import jsonschema

# The files test_json_constraint writes, and the fewest documents each must hold.
EXPECTED = {"random_logits": 100, "budgets": 100, "demo_model": 8, "random_model": 200}


def main():
    directory = pathlib.Path(sys.argv[1])
    failures = missing = 0
    for name, at_least in EXPECTED.items():
        path = directory / f"json_constraint_{name}.jsonl"
        if not path.exists():
            print(f"{path}: missing (test_json_constraint did not write it)")
            missing += 1
            continue
        good = total = 0
        # split("\n"), not splitlines(): a document may hold U+2028 or U+0085, which JSON strings
        # may carry raw and splitlines() would break the line at.
        for number, line in enumerate(path.read_text(encoding="utf-8").split("\n")[:-1], 1):
            total += 1
            case = json.loads(line)
            try:
                document = json.loads(case["document"])
                validator = jsonschema.validators.validator_for(case["schema"], default=jsonschema.Draft202012Validator)
                validator.check_schema(case["schema"])
                validator(case["schema"]).validate(document)
                good += 1
            except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError) as error:
                message = str(error).splitlines()[0]
                print(f"{path}:{number}: {message}\n  schema: {json.dumps(case['schema'], ensure_ascii=False)}\n"
                      f"  document: {case['document']!r}")
        print(f"{path.name}: {good} of {total} documents parse and validate")
        if good != total or total < at_least:
            failures += 1
    if failures:
        return 1
    if missing:
        return 1 if os.environ.get("CI") == "true" else 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
