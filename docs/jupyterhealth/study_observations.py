#!/usr/bin/env python3
"""From a token to a pandas DataFrame of a study's observations.

The HTTP calls jupyterhealth-client (0.4.0) makes, one public method after
the other, made here with requests and yarl alone, against the exchange:
what a notebook written for JupyterHealth Exchange does when JHE_URL names
the exchange. Each answer is checked for the fields the client reads; the
script stops at the first one missing (exit status 1).

    JHE_URL=http://localhost:8000 JHE_TOKEN=... python3 study_observations.py --study 1
    JHE_URL=http://localhost:8000 JHE_TOKEN=... python3 study_observations.py --patient 2 --code omh:heart-rate:2.0

Needs python3-requests, python3-yarl and python3-pandas (Debian) or their
PyPI packages. docs/jupyterhealth.md tells the same path with the client.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys

import pandas as pd
import requests
from yarl import URL

OPEN_MHEALTH = "https://w3id.org/openmhealth"


class Exchange:
    """The two APIs the client calls: /api/v1 (admin) and /FHIR/R5."""

    def __init__(self, url: str, token: str):
        self.base = URL(url)
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str, params: dict | None = None, fhir: bool = False):
        """GET one answer: a path under the API, or an absolute link."""
        if "://" in path:
            url = URL(path)
        else:
            url = self.base / ("FHIR/R5" if fhir else "api/v1") / path
        r = self.http.get(str(url), params=params)
        if not r.ok:
            # The admin API explains in {"detail"}, FHIR in an OperationOutcome.
            try:
                detail = r.json().get("detail") or r.text
            except ValueError:
                detail = r.text
            raise SystemExit(f"GET {r.url}: {r.status_code} {detail[:500]}")
        return r.json()

    def pages(self, path: str, params: dict | None = None):
        """Every item of an admin list, following next as given."""
        page = self.get(path, params)
        while True:
            require(page, "count", "next", "previous", "results")
            yield from page["results"]
            if not page["next"]:
                return
            page = self.get(page["next"])

    def search(self, resource_type: str, params: dict):
        """Every resource of a FHIR search, _count=1000 and next links, each
        id once (the client drops repeats; the exchange never sends any)."""
        params = dict(params, _count=1000)
        bundle = self.get(resource_type, params, fhir=True)
        seen = set()
        while True:
            require(bundle, "resourceType", "type", "link", "entry")
            fresh = False
            for entry in bundle["entry"]:
                resource = entry["resource"]
                if resource["id"] in seen:
                    raise SystemExit(f"{resource_type}/{resource['id']} came twice while paging")
                seen.add(resource["id"])
                fresh = True
                yield resource
            next_link = next((link["url"] for link in bundle["link"] if link["relation"] == "next"), None)
            if not next_link or not fresh:
                return
            bundle = self.get(next_link)


def require(obj, *fields):
    """Stop unless obj is an object with every field."""
    missing = [f for f in fields if not isinstance(obj, dict) or f not in obj]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)} in {json.dumps(obj)[:500]}")


PATIENT_FIELDS = ("id", "jheUserId", "identifier", "identifiers", "nameFamily", "nameGiven",
                  "birthDate", "telecomPhone", "telecomEmail", "organizationId", "organizations")


def flatten(value, prefix=""):
    """Nested objects and lists as one level: {"a": {"b": 5}} -> {"a_b": 5}."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    flat = {}
    for key, item in items:
        name = f"{prefix}_{key}" if prefix else str(key)
        if isinstance(item, (dict, list)):
            flat.update(flatten(item, name))
        else:
            flat[name] = item
    return flat


def row_of(observation):
    """An Observation as a DataFrame row: its own fields and its data
    point's (the Base64 JSON of valueAttachment), header and body."""
    attachment = observation["valueAttachment"]
    if "json" not in attachment["contentType"]:
        raise SystemExit(f"Observation/{observation['id']}: {attachment['contentType']} is not JSON")
    point = json.loads(base64.b64decode(attachment["data"]))
    row = {"code": observation["code"]["coding"][0]["code"]}
    row.update(flatten({k: v for k, v in observation.items() if k != "valueAttachment"}))
    row.update(flatten(point.get("header", {})))
    row.update(flatten(point.get("body", point)))
    for key in [k for k in row if k.endswith("date_time")]:
        row[key + "_local"] = pd.to_datetime(row[key]).tz_localize(None)
        row[key] = pd.to_datetime(row[key], utc=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=int, help="the study whose observations to read")
    parser.add_argument("--patient", type=int, help="the patient whose observations to read")
    parser.add_argument("--code", help="one kind of data point, such as omh:blood-pressure:4.0")
    args = parser.parse_args()
    if not args.study and not args.patient:
        parser.error("give --study or --patient (or both)")
    jhe = Exchange(os.environ["JHE_URL"], os.environ["JHE_TOKEN"])

    # get_user
    me = jhe.get("users/profile")
    require(me, "id", "email", "firstName", "lastName", "isSuperUser", "patient")
    print(f"signed in as {me['email']} (user {me['id']})")

    # list_studies, get_study
    for study in jhe.pages("studies"):
        require(study, "id", "name", "description", "organization")
        print(f"  study {study['id']}: {study['name']} ({study['organization']['name']})")
        require(jhe.get(f"studies/{study['id']}"), "id", "name", "organization")

    # list_organizations, get_organization (ROOT is 0)
    for org in jhe.pages("organizations"):
        require(org, "id", "name", "type", "partOf", "children", "currentUserRole")
    root = jhe.get("organizations/0")
    require(root, "id", "name", "children")
    print(f"organizations under ROOT: {', '.join(o['name'] for o in root['children'])}")

    # list_patients (with the client's filters), get_patient, get_patient_consents
    filters = {"study_id": args.study} if args.study else {}
    patients = list(jhe.pages("patients", filters))
    for patient in patients:
        require(patient, *PATIENT_FIELDS)
        require(jhe.get(f"patients/{patient['id']}"), *PATIENT_FIELDS)
        consents = jhe.get(f"patients/{patient['id']}/consents")
        require(consents, "patient", "consolidatedConsentedScopes", "studiesPendingConsent", "studies")
        print(f"  patient {patient['id']}: {patient['nameFamily']}, {patient['nameGiven']} "
              f"in {len(consents['studies'])} studies, {len(consents['studiesPendingConsent'])} pending")
        if patient["organizationId"] is not None:
            require(jhe.get(f"organizations/{patient['organizationId']}"), "id", "name", "partOf")

    # lookup_patient: by email (global_lookup), by an external id (the
    # client reads every patient; the exchange also finds it in one request)
    for patient in patients[:1]:
        if patient["telecomEmail"]:
            found = jhe.get("patients/global_lookup", {"email": patient["telecomEmail"]})
            if [p["id"] for p in found] != [patient["id"]]:
                raise SystemExit(f"global_lookup of {patient['telecomEmail']} found {found}")
        for identifier in patient["identifiers"]:
            scanned = [p["id"] for p in jhe.pages("patients") if any(i["value"] == identifier["value"] for i in p["identifiers"])]
            direct = [p["id"] for p in jhe.pages("patients", {"identifier": identifier["value"]})]
            if scanned != [patient["id"]] or direct != scanned:
                raise SystemExit(f"the patient of {identifier['value']}: {scanned} by scanning, {direct} by identifier")

    # list_data_sources
    for source in jhe.pages("data_sources"):
        require(source, "id", "name", "type", "supportedScopes")

    # list_observations_df: the client codes a bare code on Open mHealth's system
    params = {}
    if args.study:
        params["patient._has:Group:member:_id"] = args.study
    if args.patient:
        params["patient"] = args.patient
    if args.code:
        params["code"] = args.code if "|" in args.code else f"{OPEN_MHEALTH}|{args.code}"
    frame = pd.DataFrame.from_records([row_of(o) for o in jhe.search("Observation", params)])
    print(f"observations: {len(frame)} rows, {len(frame.columns)} columns")
    if len(frame):
        columns = [c for c in ("subject_reference", "code", "effective_time_frame_date_time") if c in frame.columns]
        values = [c for c in frame.columns if c.endswith("_value")]
        print(frame[columns + values].to_string(max_rows=20))
        print(frame.groupby("code").size().to_string())
    print(f"rows: {len(frame)}")


if __name__ == "__main__":
    sys.exit(main())
