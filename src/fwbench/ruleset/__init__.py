"""Rule sets: the model (model.py), the templates that build rule sets of it
(templates/), importers of real rule sets (importers/), one renderer per backend
family (render/), the reference evaluator (evaluate.py) and packet corpora
(corpus.py, flows.py).

Everything here is pure: no root, no kernel, no subprocess. Renderers turn a
RuleSet into the exact text a backend loads, so they are tested with golden files.
"""
