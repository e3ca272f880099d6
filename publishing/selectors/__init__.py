"""Publishing's reads, by subject (as publishing.actions is by subject): every query a view, an action
or a handler needs, by name. Importers name the module (publishing.selectors.briefs, ...): this
package re-exports nothing, so that importing one family of reads never imports another's
dependencies (review, publish_checks, problems and metrics read the approvals; the rest do not).
"""
