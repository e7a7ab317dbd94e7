"""Topic and record definitions: topic names, the record models of docs/CONTRACTS.md, the observation
contract registry and capability catalog (as data), and the gate that turns raw bytes into a typed
record or a typed rejection. Depends on nothing else in the project."""
