"""Kubernetes' name and label grammars, written once (pure).

The models (``spec.py``), the manifest reader, the CRD's CEL rules and the operator's child names all
check against these patterns; a second spelling of one of them could drift from the first and let the
validator accept a name the renderer then mangles. The grammars are Kubernetes' own
(k8s.io/apimachinery/pkg/util/validation): DNS-1123 labels and subdomains, DNS-1035 labels, and
label keys and values; written in the RE2 subset so the CRD's CEL ``matches()`` uses them verbatim.
"""

from __future__ import annotations

import re
from typing import Final

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
#: The name part of a label key or extended resource: at most 63 characters, letters, digits, '-', '_'
#: and '.', starting and ending with a letter or digit.
_QUALIFIED_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"

#: A DNS-1123 label: namespaces, Kueue LocalQueues, and most object names that become label values.
DNS_LABEL_PATTERN: Final = rf"^{_LABEL}$"
#: A DNS-1123 subdomain: Secret, PersistentVolumeClaim, ConfigMap and PriorityClass names.
DNS_SUBDOMAIN_PATTERN: Final = rf"^{_SUBDOMAIN}$"
#: A DNS-1035 label (starts with a letter): FlashRLJob and RayJob names, which become Service names.
DNS_1035_LABEL_PATTERN: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: A label or taint key: an optional DNS-subdomain prefix and "/", then a name of up to 63 characters.
LABEL_KEY_PATTERN: Final = rf"^({_SUBDOMAIN}/)?{_QUALIFIED_NAME}$"
#: A label or taint value (may be empty; at most 63 characters, checked separately).
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: A label value that may not be empty (a node selector value such as the GPU product).
NONEMPTY_LABEL_VALUE_PATTERN: Final = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
#: An extended resource name: a domain prefix (required), "/", and a qualified name.
EXTENDED_RESOURCE_PATTERN: Final = rf"^{_SUBDOMAIN}/{_QUALIFIED_NAME}$"

DNS_LABEL_RE: Final = re.compile(DNS_LABEL_PATTERN)
DNS_SUBDOMAIN_RE: Final = re.compile(DNS_SUBDOMAIN_PATTERN)
DNS_1035_LABEL_RE: Final = re.compile(DNS_1035_LABEL_PATTERN)
LABEL_KEY_RE: Final = re.compile(LABEL_KEY_PATTERN)
LABEL_VALUE_RE: Final = re.compile(LABEL_VALUE_PATTERN)
#: Any character a DNS-1123 label may not hold (for turning free text into a name).
NOT_DNS_LABEL_CHAR_RE: Final = re.compile(r"[^-a-z0-9]")
#: Any character a label value may not hold.
NOT_LABEL_VALUE_CHAR_RE: Final = re.compile(r"[^-A-Za-z0-9_.]")
