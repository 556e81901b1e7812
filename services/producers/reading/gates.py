"""The rule-based gates a sentence passes before anything is read from it.

They are cheap (a few compiled patterns) and deliberately conservative, in the four languages
the corpus covers (English, German, French, Spanish):

- `has_anchor`: most chat text names no preference at all; a clause reaches the encoder only
  when it holds a word a preference is made of (a speaker's "I/my/we", a style word, a
  gazetteer value, a ban);
- `is_question`: "should I use pnpm?", "kannst du ...?" asks; but a polite request phrased as a
  question ("can you keep it short?", "könntest du auf Deutsch antworten?") is an instruction,
  and `polite_request` strips its frame;
- `about_someone_else`: "my manager prefers tables", "Sarah lives in Berlin", "he said ...":
  someone else's preference, never the user's;
- `hypothetical`: "if I used pnpm", "I might switch", "thinking about trying Deno";
- `past`: "I used to work at Acme" says where the user was, not what holds now;
- `stance`: declared ("from now on ..."), one-off (about this answer) or standing.

Long on purpose: a table of patterns in four languages, each gate's patterns beside the
function that uses them, read top to bottom.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE

_POLITE_RE = re.compile(
    r"^¿?(?:(?:please|so|ok|okay|hey|hi|also|and|but|by\s+the\s+way|btw|actually|oh|then|"
    r"now|one\s+more\s+thing|bitte|übrigens|s'il te plaît|au\s+fait|d'ailleurs|por favor|"
    r"por\s+cierto)[\s,]+)*"
    r"(?:(?:can|could|would|will)\s+you|would\s+you\s+mind|"
    r"(?:kannst|könntest|würdest)\s+du|(?:können|könnten|würden)\s+sie|"
    r"(?:peux|pourrais)[- ]tu|(?:pouvez|pourriez)[- ]vous|tu\s+peux|vous\s+pouvez|"
    r"(?:puedes|podrías|podrias|podría|podria)(?:\s+usted)?|me\s+(?:lo\s+)?(?:pones|puedes)|"
    r"can\s+u|could\s+u)\s+"
    r"(?:(?:please|kindly|just|also|maybe|perhaps|bitte|mal|vielleicht|peut-être)\s+)*",
    _I)
_QUESTION_START_RE = re.compile(
    r"^(?:should|shall|do|does|did|is|are|am|was|were|can|could|would|will|may|might|have|has|"
    r"what|which|why|how|who|whats|what's|is\s+it|"
    # "when" and "where" open a question only with the verb straight after ("When is ...");
    # "When people are too formal, be casual", "Where possible, use tables" ask for something
    r"(?:when|where)\s+(?:is|are|am|was|were|do|does|did|will|would|can|could|should|shall|"
    r"may|might|has|have|had)|"
    r"quand\s+(?:est|sont|faut|dois|doit|peux|peut|pourr\w*|va|vas|allez|avez|as)|"
    r"soll|sollte|ist|sind|gibt|was|welche[rsn]?|wie|warum|wann|wo|wer|kann|hast|habe|"
    r"est-ce|qu'est|quel(?:le)?s?|pourquoi|comment|où|qui|faut-il|dois-je|"
    r"qué|que|cuál|cual|cómo|como|por\s+qué|cuándo|dónde|quién|debo|debería|es\s+mejor)\b",
    _I)

_SOMEONE_RE = re.compile(
    r"(?<!s')\b(?:he|she|he's|she's|they|they're|his|her|their|er|(?-i:sie)|sein|seine|il|elle|"
    r"ils|elles|lui|leur|él|ella|ellos|ellas|su|sus)\b"
    r"|\b(?:a|an|einen?|einem|einer|un|une|una?)\s+(?:client|customer|kunden?|kundin|colleague|"
    r"kolleg\w*|friend|freund\w*|collègue|ami|amie|cliente|compañer[oa]|amig[oa])\b"
    r"|\b(?:my|our|the|his|her|their|mein(?:e|em|en|er)?|unser(?:e|em|en|er)?|der|die|mon|ma|"
    r"mes|notre|nos|le|la|mi|mis|nuestro|nuestra|el)\s+(?:manager|boss|colleague|colleagues|coworker|co-worker|teammate|"
    r"client|clients|customer|customers|wife|husband|partner|friend|friends|brother|sister|"
    r"mom|mum|dad|mother|father|son|daughter|kid|kids|cto|ceo|lead|team\s+lead|cofounder|"
    r"co-founder|founder|mitgründer|associé|socio|parents|mother-in-law|grandma|grandpa|"
    r"family|eltern|padres|familia|famille|grandmother|grandfather|aunt|uncle|cousin|sister|"
    r"brother|schwester|bruder|sœur|frère|hermana|hermano|"
    r"neighbou?r|landlord|roommate|flatmate|oma|opa|tante|onkel|nachbar\w*|grand-mère|"
    r"grand-père|tante|oncle|voisin\w*|abuela|abuelo|tía|tío|vecin[oa]|"
    r"chef|chefin|kollege|kollegin|kollegen|kunde|kunden|frau|mann|freund|freundin|"
    r"collègue|collègues|patron|patronne|client|cliente|clientes|femme|mari|ami|amie|"
    r"jefe|jefa|compañero|compañera|compañeros|esposa|esposo|amigo|amiga)\b"
    , _I)
#: reported speech: somebody else's words, whatever clause they are in
_REPORTING_RE = re.compile(
    r"(?<!\bi\s)(?<!\bwe\s)(?<!\bich\s)(?<!\bwir\s)(?<!\bje\s)(?<!\bj')(?<!\byo\s)"
    # the speaker's own words: "j'ai dit", "je t'ai dit", "ich habe gesagt", "was ich ... gesagt
    # habe" (the verb after is the speaker's)
    r"(?<!\bj'ai\s)(?<!\bt'ai\s)(?<!\bhabe\s)(?<!\bhab\s)"
    r"\b(?:says|said|told|tells|asked|sagt|sagte|gesagt(?!\s+(?:habe|hab)\b)|meint|meinte|"
    r"findet|dit|a\s+dit|trouve|dice|dijo|cree)\b",
    _I)
#: "our team/company uses ..." is the user's own; "my colleague Sam prefers" is not
_OWN_GROUP_RE = re.compile(
    r"\b(?:my|our|unser(?:e|em|en)?|mein(?:e)?|notre|nos|nuestro|nuestra|nuestros)\s+"
    r"(?:team|company|org|stack|project|codebase|startup|app|équipe|entreprise|equipo|empresa|"
    r"firma|projekt|projet|proyecto)\b", _I)
#: a proper name followed by a stating verb: "Sarah lives in Berlin", "Paul uses vim"
_NAMED_SUBJECT_RE = re.compile(
    r"(?:^|[,;]\s*|\n\s*[-*]?\s*)(?-i:[A-Z][a-zà-ÿ]+):?\s+(?:lives|works|uses|is|prefers|likes|"
    r"wants|speaks|"
    r"wohnt|arbeitet|nutzt|benutzt|ist|habite|travaille|utilise|est|vive|trabaja|usa|es)\b")
_NOT_NAMES = frozenset(
    """i i'm it this that there here please also just and but so we my our the ok okay yes no
    ich es das bitte je ce c'est il yo eso esto por también on nous wir du tu we they hier
    dort aquí ici""".split())

_HYPOTHETICAL_RE = re.compile(
    r"(?:^if\b(?!\s+(?:it|that)(?:'s|\s+is)?\s+(?:matters?|relevant|helps?))|"
    # a concession ("even if I write in German") is no condition on what the sentence says
    r"(?<!\beven\s)\bif\s+(?:i|we|i'd|we'd|i\s+were|you\s+were)\b)|"
    r"\b(?:suppose|supposing|imagine|assuming|hypothetically|in\s+case|what\s+if|maybe|"
    r"perhaps|possibly|probably|might|considering|thinking\s+(?:about|of)|wondering|whether|"
    r"(?:i|we)\s+(?:may|could|plan|intend|hope|wish)|"
    r"(?:i'm|i\s+am|we're|we\s+are)\s+(?:going|planning|about|hoping|tempted)\s+to|"
    r"(?:i|we)\s+(?:'ll|will)\s+(?:probably|maybe|try|see|think|consider)|"
    r"(?:want|wanna|plan|planning)\s+to\s+(?:try|switch|migrate|move|start|learn|look)|"
    r"falls|(?<!\bauch\s)(?<!\bselbst\s)wenn\s+(?:ich|wir)|vielleicht|eventuell|wahrscheinlich|überlege\w*|"
    r"würde\s+gern\s+mal|"
    r"(?<!\bmême\s)si\s+(?:je|j'|on|nous)|peut-être|peut\s+être|probablement|envisage|je\s+pense\s+à|"
    r"(?<!\bincluso\s)si\s+(?:yo|usara|usáramos|cambiara)|quizás|quizá|tal\s+vez|a\s+lo\s+mejor|probablemente|"
    r"estoy\s+pensando|no\s+tengo\s+claro|no\s+sé\s+si|je\s+ne\s+sais\s+pas\s+si|"
    r"weiß\s+nicht,?\s+ob|not\s+sure\s+(?:if|whether))\b", _I)
_PAST_RE = re.compile(
    r"\b(?:used\s+to|back\s+then|back\s+in\s+the\s+day|years\s+ago|in\s+(?:19|20)\d\d|had|"
    r"i\s+was|we\s+were|i\s+worked|we\s+used|früher|damals|gewohnt|gearbeitet|j'étais|"
    r"habité|era|trabajé|viví|vivía|born|geboren|né|née|nací|nacida|nacido|back\s+in\s+uni|"
    r"back\s+in\s+school|in\s+college|at\s+uni|ne\s+suis\s+plus|n'habite\s+plus|ya\s+no\s+estoy|"
    r"ya\s+no\s+vivo|wohne\s+nicht\s+mehr|"
    r"avant|autrefois|utilisait|utilisais|antes|trabajaba|usaba|vivía|solía|no\s+longer\s+at|"
    r"ya\s+no\s+trabajo)\b", _I)
#: a clause that takes something back: "forget the tables", "scratch what I said about pnpm"
_RETRACTION_RE = re.compile(
    r"^(?:(?:ok|okay|so|and|actually|hmm|also|wait)[\s,]+)*(?:(?:(?:please|bitte)[\s,]+)?"
    r"(?:forget|scratch|ignore|ignorier\w*|ignora|ignorez|disregard|never\s+mind|vergiss|"
    r"vergessen\s+sie|oublie|oubliez|olvida|olvide|olvídate)|drop|earlier\s+i|before\s+i)\b"
    # a condition or a concession states nothing of its own
    r"|^(?:unless|even\s+if|even\s+when|except\s+when|außer\s+wenn|auch\s+wenn|"
    r"selbst\s+wenn|sauf\s+si|même\s+si|a\s+menos\s+que|aunque|incluso\s+si)\b", _I)

_DECLARED_RE = re.compile(
    r"\b(?:from\s+now\s+on|from\s+here\s+on|going\s+forward|moving\s+forward|in\s+(?:the\s+)?"
    r"future|always|every\s+time|each\s+time|by\s+default|remember\s+that|please\s+remember|"
    r"keep\s+in\s+mind|for\s+good|"
    r"ab\s+jetzt|ab\s+sofort|von\s+jetzt\s+an|künftig|in\s+zukunft|immer|jedes\s+mal|"
    r"dorénavant|désormais|à\s+partir\s+de\s+maintenant|toujours|à\s+l'avenir|"
    r"a\s+partir\s+de\s+ahora|de\s+ahora\s+en\s+adelante|siempre|en\s+adelante)\b", _I)
#: one-off: a request about this answer, not about answers in general
_ONE_OFF_RE = re.compile(
    r"\b(?:this|that|these|those|(?:make|do|put|rewrite|redo|turn|say)\s+it|"
    r"the\s+(?:last|previous)\s+\w+|step\s+\d+|schritt\s+\d+|étape\s+\d+|paso\s+\d+|above|here|"
    r"again|nochmal|noch\s+einmal|encore|otra\s+vez|de\s+nuevo|this\s+one|celle-ci|"
    r"celui-ci|esta\s+parte|me\s+lo|"
    r"this\s+time|for\s+now|just\s+this|tl;?dr|"
    r"dies(?:e[nrs]?)?|das|hier|diesmal|oben|ça|cela|ce\s+(?:texte|message|code)|ceci|"
    r"cette\s+fois|ci-dessus|esto|eso|esta\s+vez|aquí|arriba|este\s+(?:texto|código))\b", _I)
#: "answers", "replies", "always": about answers in general, which a deictic word does not undo
_GENERAL_RE = re.compile(
    r"\b(?:answers|replies|responses|messages|explanations|in\s+general|generally|"
    # "could you keep things short?": things in general, not this answer (unless it is said:
    # "keep things short in this reply")
    r"(?:keep|make)\s+(?:things|everything)(?![^.?!]*\b(?:this|that)\s+(?:reply|answer|one|"
    r"time|email|message|response|draft))|"
    r"antworten|erklärungen|réponses|explications|respuestas|explicaciones|mensajes|"
    # a concession looks past this answer: "answer in English even if I write in German"
    r"even\s+(?:if|when)|auch\s+wenn|selbst\s+wenn|même\s+si|incluso\s+si|aunque|"
    r"whenever|every\s+time|immer\s+wenn|jedes\s+mal|chaque\s+fois|cada\s+vez\s+que|i\s+(?:prefer|like|want|'d\s+rather|would\s+rather)|"
    r"ich\s+(?:bevorzuge|mag|möchte|hätte\s+gern)|je\s+préfère|j'aime|prefiero|me\s+gusta)\b",
    _I)
_BARE_COMPARATIVE_RE = re.compile(
    r"^(?:(?:please|pls|plz|bitte|s'il te plaît|por favor|a\s+bit|way|much|even|etwas|un\s+peu|"
    r"un\s+poco)\s+)*(?:shorter|longer|briefer|simpler|(?:less|more)\s+\w+|"
    r"(?:way\s+|much\s+)?too\s+(?:long|short|wordy|verbose)|zu\s+lang|trop\s+long|"
    r"demasiado\s+largo|(?:elaborate|go\s+deeper|expand)(?:\s+on\s+[^,;]{1,60})?|"
    r"(?:be\s+)?(?:a\s+bit\s+|a\s+little\s+|way\s+|much\s+)?(?:more|less)\s+(?:formal|casual|"
    r"friendly|direct|polite|detailed|concise|brief)|"
    r"kürzer|länger|ausführlicher|plus\s+court|plus\s+long|plus\s+de\s+détails|"
    r"más\s+cort[oa]s?|más\s+cortit[oa]s?|más\s+largo|más\s+detalles)(?:\s+(?:please|pls|plz|bitte|"
    r"por\s+favor|porfa|stp|svp|s'il\s+te\s+plaît))?$", _I)
#: a task in the sentence ("explain X but keep it short"): its style words are for this answer
_TASK_RE = re.compile(
    r"\b(?:explain|tell\s+me|show\s+me|walk\s+me|fix|help|summari[sz]e|describe|"
    r"translate|erklär\w*|zeig\w*|hilf|fass\w*\s+zusammen|expli\w*|montre\w*|"
    r"aide|résume\w*|explica\w*|muestra\w*|ayúda\w*|resume\w*|"
    # writing is a task, not writing *in* a way ("write in prose", "schreib auf Deutsch")
    r"(?:write|schreib\w*|écri\w*|escrib\w*)(?!\s+(?:in|as|like|auf|en|como|comme)\b))\b",
    _I)

#: a clause reaches the encoder only with one of these words (or a gazetteer value)
ANCHOR_WORDS = frozenset(
    """i i'm i'd im my me we we're our us mine call prefer rather like want please pls plz
    always never don't dont no stop avoid answer answers reply replies respond write keep make
    use using skip short shorter brief concise terse detail detailed details long verbose
    bullet bullets table tables prose code diff diffs example examples emoji emojis emoticons
    tone formal casual friendly direct intro preamble point explanations
    ich mein meine mich mir wir unser unsere bitte immer nie keine kein antworte antworten
    kurz kürzer knapp ausführlich tabelle tabellen beispiele stichpunkte förmlich locker nenn
    je j'ai j'aime je suis moi mon ma mes nous notre réponds répondez réponses court courte
    courtes détaillé détaillées tableau tableaux exemples toujours jamais pas appelle
    yo mi mis me llamo nosotros nuestro nuestra responde respuestas corto corta cortas breve
    detallado detalladas tabla tablas ejemplos siempre nunca llámame prefiero uso usamos
    sin emoji emojis nous j'habite j'utilise je j'ai soy estoy vivo trabajo uso usamos
    programo wohne arbeite nutze nutzen bin sind est sommes somos tenemos tengo haben avons
    détailler détaille detalla
    detallar tldr let's lets direkt förmlich formell freundlich locker direct formel amical
    décontracté directo amable informal sei sois sé""".split())
_WORD_RE = re.compile(r"[\w']+")


def words(text: str) -> frozenset[str]:
    return frozenset(_WORD_RE.findall(text.lower()))


def has_anchor(text: str) -> bool:
    """A speaker's word, a ban, or a word some style key is stated with."""
    return not ANCHOR_WORDS.isdisjoint(words(text)) or _ON_SUBJECT_RE.match(text) is not None \
        or any(cue.search(text) for cue in STYLE_CUES.values())


_CAPABILITY_RE = re.compile(
    r"^(?:speak|understand|read|see|hear|know|access|recommend|suggest|find|look\s+up|search|"
    r"tell\s+me\s+about|sprechen|sprichst|verstehen|verstehst|empfehlen|"
    r"parler|parles|comprendre|hablar|hablas|entender)\b", _I)


def polite_request(sentence: str) -> str | None:
    """The instruction inside a polite question ("can you keep it short?" -> "keep it
    short"), or None when the sentence is no such request ("can you speak Japanese?" asks
    what the assistant can do)."""
    m = _POLITE_RE.match(sentence)
    if m is None or _CAPABILITY_RE.match(sentence[m.end():]):
        return None
    return sentence[m.end():]


def is_question(sentence: str) -> bool:
    """A real question: ends with "?" (and is no polite request) or starts like one."""
    core = sentence.strip(" \x00")
    if polite_request(core) is not None:
        return False
    if _POLITE_RE.match(core):
        return True  # polite_request() was None: a capability question ("can you speak ...?")
    return core.endswith("?") or core.startswith("¿") or _QUESTION_START_RE.match(core) is not None


_PRONOUNS_RE = re.compile(r"\b(?:he/him|she/her|they/them|he/they|she/they)\b", _I)


#: what makes the person a clause names the speaker ("I'm the CTO") or a likeness ("like a
#: friend")
_BEING_RE = re.compile(r"\b(?:i'm|i\s+am|im|ich\s+bin|je\s+suis|soy|like|wie|comme|como)\s+$",
                       _I)


#: what the agent did, said of it: "but you answered in German", "you keep using bullets"
_WHAT_YOU_DID_RE = re.compile(
    r"^(?:(?:but|and|yet|aber|mais|pero)\s+)?you(?:'ve|\s+have)?\s+(?:still\s+|always\s+)?"
    r"(?:keep|kept|answered|used|wrote|replied|went|did|gave|sent|switched|started|ignored|"
    r"forgot|responded)\b", _I)


def what_you_did(clause: str) -> bool:
    """A clause about what the agent did ("but you answered in German", "you keep using
    bullets"): a complaint, whose values are the agent's, not the user's wish."""
    return _WHAT_YOU_DID_RE.match(clause.strip()) is not None


def someone_else_in(clause: str) -> bool:
    """Whether the clause is about someone else ("my manager prefers tables", "she speaks
    Spanish"): that clause states nothing of the user's, the others of its sentence may.
    The user's own pronouns ("(he/him)") are no other person."""
    text = _PRONOUNS_RE.sub(" ", _OWN_GROUP_RE.sub(" ", clause))
    # "I'm the CTO": the person named is the speaker; "talk to me like a friend": a likeness
    return any(_BEING_RE.search(text, 0, m.start()) is None for m in _SOMEONE_RE.finditer(text))


_FOR_ME_RE = re.compile(
    r"\b(?:but|while|whereas|aber|doch|mais|alors\s+que|pero|mientras)\s+"
    r"(?:for\s+me|personally|i\s+(?:prefer|like|want|need)|für\s+mich|ich\s+(?:mag|will|"
    r"brauche|bevorzuge)|pour\s+moi|moi\s+je|perso|para\s+mí|yo\s+prefiero)\b", _I)


def about_someone_else(sentence: str) -> bool:
    """Whether the sentence reports someone's words ("he said to keep it short", "Sarah
    says ...") or has a named person as its subject ("Sarah lives in Berlin"): then none of
    its clauses is the user's own, unless the user sets their own against it ("my colleague
    asked for detailed reports, but for me bullets work best"): each clause is then judged on
    its own."""
    if _FOR_ME_RE.search(sentence):
        return False
    if _REPORTING_RE.search(_OWN_GROUP_RE.sub(" ", sentence)):
        return True
    if _NAMING_ME_RE.search(sentence):
        return False  # "call me Liz, Elizabeth is too formal": the names are the user's own
    for m in _NAMED_SUBJECT_RE.finditer(sentence):
        first = m.group().lstrip(",; ").split()[0]
        if first.lower() not in _NOT_NAMES and not _known_thing(first):
            return True
    return False


#: the speaker naming what to call them: any other name in the sentence is a form of theirs
_NAMING_ME_RE = re.compile(r"\b(?:call\s+me|i\s+go\s+by|address\s+me\s+as|"
                           r"nenn\w*\s+mich|appelle[sz]?[- ]moi|llámame|llamame)\s+[A-ZÀ-Þ]")


def _known_thing(word: str) -> bool:
    """A capitalised tool, channel or language ("Slack is the best way") is no person."""
    from habitus.vocabulary import canonical_language, canonical_tool

    return (canonical_tool(word.lower()) is not None or canonical_language(word) is not None
            or word.lower() in {"slack", "email", "telegram", "whatsapp", "signal", "discord",
                                "teams", "sms"})


_FIRST_PERSON = frozenset(
    """i i'm i'd i've im my me we we're our us ich mich mir mein meine wir uns unser unsere je
    j'ai j'aime moi mon ma mes nous notre yo me mi mis nosotros nuestro nuestra""".split())
#: French "on" is "we" only as a subject, at the start of its clause ("on utilise Vue")
_ON_SUBJECT_RE = re.compile(r"^\W*on\s+(?!the\b|a\b|my\b|your\b|it\b|this\b)\w", _I)


def first_person(clause: str) -> bool:
    """Whether the clause has the user as a speaker ("I", "my", "we", "ich", "je", "yo")."""
    return not _FIRST_PERSON.isdisjoint(words(clause)) or _ON_SUBJECT_RE.match(clause) is not None


def hypothetical(sentence: str) -> bool:
    return _HYPOTHETICAL_RE.search(sentence) is not None


_NOW_RE = re.compile(r"\b(?:moved|switched|migrated|now|nowadays|jetzt|maintenant|ahora|"
                     r"umgezogen|umgestiegen)\b", _I)


def past(clause: str) -> bool:
    """A clause about how things were ("I used to work at Acme", "we had Heroku in 2019");
    "we moved to Denver in 2022" is about now."""
    return _PAST_RE.search(clause) is not None and _NOW_RE.search(clause) is None


#: "I said ..." quotes the speaker's earlier words: taken back when the sentence moves off them
#: ("I said Python earlier, but we use Go"), insisted on otherwise ("No, I said Spanish, not
#: Portuguese", "I told you I don't use Windows")
_I_SAID_RE = re.compile(r"^(?:(?:ok|okay|so|and|actually|hmm|also|wait|no)[\s,]+)*"
                        r"i\s+(?:said|told\s+you)\b", _I)
_MOVED_OFF_RE = re.compile(r"\b(?:but|earlier|before|forget|ignore|scratch|wrong|mistake|"
                           r"changed|anymore|no\s+longer|meant|i\s+mean|typo|sorry)\b", _I)


def quotes_own_words(clause: str) -> bool:
    """"I said ...", "I told you ...": the clause quotes the speaker's earlier words (a ban in
    them is what they said, not a ban said now)."""
    return _I_SAID_RE.match(clause.strip()) is not None


def retraction(clause: str, sentence: str = "") -> bool:
    """A clause that takes a value back rather than stating one."""
    core = clause.strip()
    if _I_SAID_RE.match(core):
        return _MOVED_OFF_RE.search(sentence or core) is not None
    return _RETRACTION_RE.match(core) is not None


def declared(text: str) -> bool:
    """Framed for good: "from now on", "always", "ab jetzt", "désormais", "siempre"."""
    return _DECLARED_RE.search(text) is not None


#: a verb that is itself a register ("duz mich", "vouvoie-moi", "tutéame"): how to address the
#: user, said for good
REGISTER_VERB_RE = re.compile(r"\b(?:duz\w*|siez\w*|tutoie\w*|tutoy\w*|vouvoie\w*|vouvoy\w*|"
                               r"tutéa\w*|tutea\w*)\b", _I)


def one_off(clause: str, sentence: str = "", *, polite: bool = False) -> bool:
    """About this answer only: a bare "shorter"; a deictic "this/that/step 2"; a style asked
    for beside a task ("explain X but keep it short"); or a polite request ("can you put that
    in a table?") — each unless it speaks of answers in general."""
    core = clause.strip(" .!?\x00")
    if REGISTER_VERB_RE.search(core):
        return False  # "tutoie-moi et explique simplement": how to address the user, for good
    if _BARE_COMPARATIVE_RE.match(core):
        return True
    if _GENERAL_RE.search(core) is not None or _GENERAL_RE.search(sentence) is not None:
        return False
    return (_ONE_OFF_RE.search(core) is not None or polite
            or _TASK_RE.search(sentence) is not None)


#: a count said as a digit or a word, up to ten, in the four languages ("under five lines")
_SMALL_COUNT = (r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|a\s+few|"
                r"einer?|zwei|drei|vier|fünf|sechs|sieben|acht|neun|zehn|"
                r"une?|deux|trois|quatre|cinq|six|sept|huit|neuf|dix|"
                r"una?|dos|tres|cuatro|cinco|seis|siete|ocho|nueve|diez)")
#: a limit on an answer's length in words, sentences or lines ("under 100 words", "höchstens
#: 80 Wörter", "under five lines"), not a length described ("the script is under five lines")
_WORD_LIMIT = (r"(?:(?<!\bis\s)(?<!\bwas\s)(?<!\bare\s)(?<!\bwere\s)(?<!'s\s)(?<!\bist\s)"
               r"(?<!\bwar\s)(?<!\bsind\s)(?<!\best\s)(?<!\bsont\s)(?<!\bes\s)(?<!\bson\s)"
               r"(?:under|below|max(?:imum)?|at\s+most|no\s+more\s+than|unter|höchstens|"
               r"maximal|moins\s+de|pas\s+plus\s+de|au\s+maximum|menos\s+de|no\s+más\s+de|"
               r"como\s+máximo)\s+" + _SMALL_COUNT + r"\s+(?:words|wörter\w*|mots|palabras|"
               r"sentences|lines|sätze\w*|sätzen|zeilen|phrases|lignes|frases|líneas)|"
               r"\d+\s+(?:words|sentences|lines)\s+max\b|"
               r"keep\s+(?:it|them|answers|replies)\s+to\s+(?:one|a\s+single|two|three|\d+)\s+"
               r"(?:paragraphs?|sentences?|lines?))")
#: a complaint that the answer was long, said of it at the clause's end ("that's too long",
#: "a bit long.", "das ist viel zu lang"): a request for brevity ("a long day", "the deploy
#: took too long" are no such complaint)
_TOO_LONG = (r"(?:^|(?:is|was|'s|are|were|ist|war|sind|est|es|era|fue|son)\s+)"
             r"(?:(?:way|much|far|viel|beaucoup|bien|muy)\s+)?"
             r"(?:too|a\s+bit|a\s+little|kind\s+of|pretty|quite|rather|so|zu|etwas|trop|"
             r"un\s+peu|demasiado|un\s+poco)\s+(?:long|lang|longue|larg[oa])(?=\W*$)")

WORD_LIMIT_RE = re.compile(_WORD_LIMIT, re.IGNORECASE)


#: the words a style key is stated with, in the four languages: a style label stands only
#: when its clause holds one (the encoder chooses among keys; it does not invent one)
STYLE_CUES: dict[str, re.Pattern[str]] = {
    key: re.compile(pattern, _I) for key, pattern in {
        "verbosity": r"\b(?:short|shorter|shortest|shorten|brief\w*|concise\w*|terse|succinct|"
                     r"detailed|in\s+detail|more\s+details?|details?\s+(?:please|pls)|"
                     r"(?<!\bno\s)(?<!\bany\s)longer|"
                     r"long\s+(?:answers?|versions?|explanations?|replies|responses|form|"
                     r"ones|text)|length\w*|blabla|bla\s+bla|rollo|waffle|fluff|"
                     r"elaborat\w*|expand\w*|more\s+on|go\s+into\s+detail|"
                     r"detail\w*|verbos(?:e|ity)|wordy|lengthy|thorough|in[- ]depth|deeper|essays?|"
                     r"tldr|one[- ]liners?|two\s+lines|ramble|rambling|walls?\s+of\s+text|"
                     r"kurz\w*|kürz\w*|knapp\w*|ausführlich\w*|genauer|länger\w*|"
                     r"langen?\s+(?:version|antwort\w*|erklärung\w*)|détail\w*|court\w*|"
                     r"bref|brève|plus\s+long\w*|longues?\s+(?:explications?|réponses?)|"
                     r"cort[oa]s?|cortit[oa]s?|breve\w*|detall\w*|más\s+larg\w*|"
                     r"(?:explicaciones|respuestas)\s+largas|largas\s+(?:explicaciones|respuestas)|"
                     r"resum\w*|"
                     r"resumid\w*|en\s+dos\s+líneas|al\s+grano|" + _TOO_LONG + "|"
                     + _WORD_LIMIT + ")",
        "preamble": r"\b(?:intro\w*|preamble\w*|pleasantries|small\s+talk|point|chase|"
                    r"straight|directly|get\s+to\s+it|restat\w*|certainly|great\s+question|"
                    r"repeat\w*\s+(?:the|my)\s+question\w*|"
                    r"einleitung\w*|vorrede|sache|floskeln|introduc\w*|droit\s+au\s+but|"
                    r"préambule|grano|rodeos|preámbulo)",
        "format": r"\b(?:tables?|tabular|bullet\w*|lists?|prose|paragraphs?|sentences|"
                  r"tabelle\w*|stichpunkt\w*|aufzählung\w*|fließtext|tableau\w*|puces?|"
                  r"listes?|texte\s+suivi|phrases|tablas?|viñetas?|listas?|párrafos?|"
                  r"prosa)",
        "code": r"\b(?:code\s+(?:first|only|over|before|please|zuerst|d'abord)|"
                r"(?:just|only|show|give|lead\s+with|start\s+with)\s+(?:me\s+)?(?:the\s+)?"
                r"code|diffs?|patch\w*|nur\s+(?:den\s+)?code|(?:juste|seulement)\s+le\s+code|"
                r"(?:solo|sólo|primero)\s+el\s+código|el\s+código\s+primero|den\s+code\s+zuerst)",
        "examples": r"\b(?:examples?|beispiel\w*|exemples?|ejemplos?)",
        "emoji": r"(?:emoj\w*|émoj\w*|emoticons?|smileys?)",
        "tone": r"\b(?:formal\w*|casual\w*|informal\w*|friendl\w*|warm\w*|direct\w*|"
                r"blunt\w*|sugar\w*|straightforward|polite|professional\w*|businesslike|"
                r"gentle|encouraging|supportive|"
                # honesty asked of the answers, not "to be honest, ..." said by the speaker
                r"(?<!\bto\s)be\s+(?:\w+\s+)?(?:honest|frank)|(?:honest|frank)\s+with\s+me|"
                r"professionell\w*|professionnel\w*|profesional\w*|duz\w*|siez\w*|förmlich\w*|"
                r"locker|freundlich\w*|direkt\w*|tutoy\w*|vouvoy\w*|vouvoie\w*|formel\w*|"
                r"décontract\w*|tutoie\w*|tute\w*|usted|de\s+tú|formal|amable|direct[oa]|"
                # "talk to me like a friend": the casual register by a likeness
                r"like\s+a\s+friend|wie\s+(?:mit\s+)?einem\s+freund|comme\s+(?:à\s+)?un\s+ami|"
                r"como\s+(?:a\s+)?un\s+amigo)",
    }.items()
}
#: asking for something to be written: its style words describe that text, not the answers
_ARTEFACT_RE = re.compile(
    r"^(?:(?:please|can\s+you|could\s+you|bitte|kannst\s+du)\s+)?(?:translate\b.*|"
    r"write|draft|compose|rewrite|schreib\w*|übersetz\w*|verfass\w*|écri\w*|rédige\w*|traduis|"
    r"escrib\w*|redact\w*|traduc\w*)\b.{0,40}?\b(?:e-?mail|mail|letter|message|post|essay|"
    r"reply|note|brief|absage|nachricht|lettre|courriel|correo|carta|mensaje|respuesta|"
    r"slack\s+message|text|invitation|invitación|einladung|speech|discours|discurso|rede|card|"
    r"tarjeta|karte|cover\s+letter|caption|faq|poem|story|bio|toast|summary|résumé)\b", _I)


#: what a channel preference is said with: reaching, writing, answering, "my main channel"
_CHANNEL_CUE_RE = re.compile(
    r"\b(?:reach|contact|ping|text\s+me|message\s+me|dm|\w+\s+me\s+there|slack\s+me|"
    r"hit\s+me\s+up|get\s+in\s+touch|"
    r"email\s+me|write\s+(?:to\s+)?me|call\s+me|send\s+me|notify\s+me|"
    r"keep\s+me\s+(?:posted|updated)|"
    r"best\s+way|works\s+best|channel|main|respond|reply|prefer|rather|instead|use|get\s+hold|"
    r"hauptkanal|principal|"
    r"erreich\w*|kontaktier\w*|schreib\w*\s+mir|meld\w*\s+dich|lieber|joindre|contacte\w*|"
    r"écri\w*-moi|canal|plutôt|escríbe\w*|contácta\w*|llám\w*|mánda\w*|prefier\w*|mejor)\b",
    _I)
#: a ban said right before a tool: "no moment.js", "stopped using lodash", "ya no usamos Redux"
TOOL_BAN_RE = re.compile(
    r"(?:\bno|\bnever|don't\s+(?:use|suggest|recommend)|do\s+not\s+(?:use|suggest|recommend)|"
    r"stop(?:ped)?\s+(?:using|suggesting)|quit\s+using|avoid(?:\s+using)?|ban|"
    r"keine?n?|nie(?:\s+wieder)?|nicht\s+mehr|ya\s+no\s+us\w+|dejamos\s+de\s+usar|"
    r"dej[éo]\s+de\s+usar|nunca(?:\s+uses)?|sin|arrêt\w*\s+d'utiliser|n'utilise\s+(?:jamais|plus)|"
    r"plus\s+de|pas\s+de|jamais)\s+(?:[\w.']+\s+){0,2}$", _I)


#: a channel asked for one thing: "Email me the report when it's ready", "Text me when the
#: build finishes", "Send me the summary on Slack" (not "whenever", not "updates")
_ONE_DELIVERY_RE = re.compile(
    r"\b(?:when|once|as\s+soon\s+as|after)\b(?!\s+(?:possible|you\s+can))"
    r"|\b(?:send|email|mail|text|message|slack|dm|forward)\s+me\s+(?:the|this|that|it|those|"
    r"these)\b", _I)


def one_delivery(sentence: str) -> bool:
    """Whether a channel is asked for one delivery (this report, when this build finishes):
    evidence of how the user likes to be reached, not their channel for everything."""
    return _ONE_DELIVERY_RE.search(sentence) is not None


def states_channel(clause: str) -> bool:
    """Whether the clause says how to reach the user, not merely names a channel."""
    return _CHANNEL_CUE_RE.search(clause) is not None


#: reaching the user, said with a verb: "ping me in Slack", "I'd rather get updates in Slack"
#: name the way to reach them
_REACH_RE = re.compile(
    r"\b(?:reach|contact|ping|text\s+me|message\s+me|dm|slack\s+me|hit\s+me\s+up|"
    r"get\s+in\s+touch|email\s+me|write\s+(?:to\s+)?me|call\s+me|get\s+hold|get|receive|"
    r"hear|send\s+me|notify|keep\s+me\s+posted|let\s+me\s+know|erreich\w*|"
    r"kontaktier\w*|schreib\w*\s+mir|meld\w*\s+dich|joindre|contacte\w*|écri\w*-moi|"
    r"escríbe\w*|contácta\w*|llám\w*|mánda\w*)\b", _I)
#: a channel named as where some texts go: "German for emails", "bullets in Slack"
_CHANNEL_SCOPE_RE = re.compile(
    r"\b(?:for|in|für|pour|dans|para|en)\s+(?:(?:my|our|the|all|meine?n?|unsere?n?|die|mes|"
    r"nos|les|mis|nuestr\w+|los|las)\s+)?$", _I)


def channel_as_scope(clause: str, start: int) -> bool:
    """Whether the channel named at `start` is where other preferences apply ("I prefer
    German in emails", "bullet points for emails"), with no word of reaching the user."""
    return (_CHANNEL_SCOPE_RE.search(clause[max(0, start - 20):start]) is not None
            and _REACH_RE.search(clause) is None)


#: the words of a friendly tone (a value cue, and a manner read by words alone)
_FRIENDLY_WORDS = (r"friendl\w*|warm\w*|kind\b|nice\b|gentle|encouraging|supportive|"
                   r"freundlich\w*|herzlich\w*|sympa\w*|chaleureu\w*|amable|cálid\w*|"
                   r"cercan\w*")
#: a value of a key that has its own words, narrower than the key's
VALUE_CUES: dict[str, re.Pattern[str]] = {
    # a table or a bullet as a way to lay out answers, not a kitchen table or a bullet journal
    "format=tables": re.compile(
        r"\btables\b(?!\s+of\s+contents)|\b(?:in|as|into|use|a|one)\s+(?:a\s+)?table\b"
        r"(?!\s+of\s+contents)|tabular|tabell\w*|tableaux?\b|\b(?:en|sous\s+forme\s+de)\s+"
        r"(?:un\s+)?tableau|tablas?\b", _I),
    "format=bullets": re.compile(
        r"\bbullet(?:s|ed|\s+points?|\s+lists?)\b|stichpunkt\w*|aufzählung\w*|puces?\b|"
        r"viñetas?\b", _I),
    # prose named, or lists said away: "I want a list of all the endpoints" asks for a list
    "format=prose": re.compile(
        r"\b(?:prose|paragraphs?|full\s+sentences|flie(?:ß|ss)text|absätzen?|phrases|"
        r"párrafos|prosa|frases)\b"
        r"|\b(?:no|not|without|stop|less|fewer|instead\s+of|rather\s+than|over|keine?n?|ohne|"
        r"pas\s+de|sans|sin|nada\s+de|menos)\b.{0,40}\b(?:lists?|bullet\w*|listen|listes?|"
        r"listas?|puces?|stichpunkt\w*|aufzählung\w*|viñetas?)", _I),
    "tone=direct": re.compile(r"direct\w*|blunt\w*|straight\w*|sugar\w*|frank\w*|honest\w*|"
                              r"direkt\w*|franc\w*|sin\s+rodeos", _I),
    "tone=friendly": re.compile(_FRIENDLY_WORDS, _I),
    "tone=formal": re.compile(r"formal\w*|polite\w*|professional\w*|businesslike|"
                              r"professionell\w*|professionnel\w*|profesional\w*|siez\w*|"
                              r"förmlich\w*|vouvoy\w*|vouvoie\w*|formel\w*|usted|formal", _I),
    "tone=casual": re.compile(r"casual\w*|informal\w*|relax\w*|laid[- ]back|stiff|duz\w*|"
                              r"freund\b|ami\b|amigo\b|"
                              r"locker\w*|tutoy\w*|tutoie\w*|décontract\w*|tute\w*|tutéa\w*|"
                              r"de\s+tú\b|coworker|friend\b", _I),
    "preamble=skip": re.compile(
        r"\b(?:skip\w*|no|without|straight|directly|get\s+to|cut|drop|lead\s+with|don't|"
        r"dont|stop|answer\s+first|pad\w*|ohne|keine?|direkt|sans|pas\s+d|droit\s+au\s+but|"
        r"sin|ve\s+al|al\s+grano|directo|rodeos|need|needed|not\s+a\s+(?:big\s+)?fan|hate|"
        r"dislike|can't\s+stand)\b", _I),
    "code=diff": re.compile(r"\b(?:diffs?|patch\w*)\b", _I),
    # the answer's code, not the user's own ("my code crashes")
    "code=code-first": re.compile(
        r"(?<!\bmy\s)(?<!\bour\s)(?<!\bmein\s)(?<!\bmeinen\s)(?<!\bmon\s)(?<!\bmi\s)"
        r"(?<!\bnotre\s)(?<!\bunser\s)\b(?:code|código)\b", _I),
}


def states_style(key: str, clause: str, value: str | None = None) -> bool:
    """Whether the clause holds a word the style key (and, where it has its own, the value)
    is stated with."""
    cue = STYLE_CUES.get(key)
    if cue is not None and cue.search(clause) is None:
        return False
    narrow = VALUE_CUES.get(f"{key}={value}")
    return narrow is None or narrow.search(clause) is not None


#: a layout already shown, named to be gone over again: "Can you go over the bullet points
#: again?" asks about the last answer's bullets, not for bullets from now on
_SHOWN_LAYOUT_RE = re.compile(
    r"\b(?:the|those|these|that|your|die|diese|les|ces|tes|vos|las|los|esas|esos|tus)\s+"
    r"(?:(?:first|last|second|third|previous|above|earlier|same|letzten|ersten|derniers?|"
    r"premiers?|últimos?|primeros?)\s+)?"
    r"(?:bullet(?:s|ed|\s+points?|\s+lists?)?|table|list|stichpunkt\w*|aufzählung\w*|tabelle|"
    r"liste|puces|tableau|viñetas|tabla|lista)\b", _I)
_REVISIT_RE = re.compile(
    r"\b(?:again|once\s+more|one\s+more\s+time|repeat\w*|go\s+(?:back\s+)?(?:over|through)|"
    r"walk\s+me\s+through|recap|explain\w*|clarify|expand\s+on|elaborate\s+on|what\s+(?:do|does|"
    r"did)|mean|read\s+(?:out|back)|nochmal|noch\s+einmal|wiederhol\w*|durchgehen|erklär\w*|"
    r"encore|répét\w*|reprend\w*|expliqu\w*|otra\s+vez|de\s+nuevo|repit\w*|repas\w*|"
    r"explic\w*)\b", _I)


_LONG_FORM = (r"(?:short\s+for|kurz\s+für|kurzform\s+von|diminutif\s+de|diminutivo\s+de)\s+"
              r"(?-i:[A-ZÀ-Þ])")
_LONG_FORM_RE = re.compile(rf"\b{_LONG_FORM}", _I)
#: a name's long form, right after the speaker's name ("My name's Jo, short for Joanna"): its
#: "short" is no length ("answers short for Jira tickets" is one; German capitalises nouns)
_SHORT_FOR_NAME_RE = re.compile(
    r"\b(?:my\s+name\s+is|my\s+name's|i'm|i\s+am|call\s+me|ich\s+heiße|ich\s+bin|nenn\s+mich|"
    r"je\s+m'appelle|appelle-moi|me\s+llamo|llámame|soy)\s+(?-i:[A-ZÀ-Þ][\w'-]*),?\s+"
    rf"{_LONG_FORM}", _I)


#: a count the layout may not pass ("no more than three bullet points"): its "no" bans nothing
_AT_MOST_RE = re.compile(
    r"\b(?:no\s+more\s+than|not\s+more\s+than|at\s+most|max(?:imum)?(?:\s+of)?|up\s+to|"
    r"höchstens|maximal|pas\s+plus\s+de|au\s+maximum|no\s+más\s+de|como\s+máximo)\s+"
    r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|a\s+few|drei|vier|fünf|"
    r"trois|quatre|cinq|tres|cuatro|cinco)\s+(?:bullet\w*|points?|items?|rows?|columns?|"
    r"lists?|headings?|sections?|stichpunkt\w*|punkte|puces|viñetas|puntos)\b", _I)


def limits_a_count(clause: str) -> bool:
    """Whether the clause caps how many of something an answer has: no layout said away."""
    return _AT_MOST_RE.search(clause) is not None


def names_a_long_form(clause: str, sentence: str) -> bool:
    """Whether the clause gives the long form of the name the sentence gives the speaker (the
    clause may be the part after the comma): its "short" says nothing of length."""
    return (_LONG_FORM_RE.search(clause) is not None
            and _SHORT_FOR_NAME_RE.search(sentence) is not None)


def revisits_shown_layout(clause: str) -> bool:
    """Whether the clause asks to go over a list or table already shown (its layout is not a
    preference: "Can you repeat the bullet points?", "Explain the table again")."""
    return (_SHOWN_LAYOUT_RE.search(clause) is not None
            and _REVISIT_RE.search(clause) is not None)


_RATHER_RE = re.compile(r"\b(?:rather|instead|prefer\w*|lieber|statt|plutôt|mejor|en\s+vez)\b",
                        _I)


_TASK_ON_TEXT_RE = re.compile(
    r"^(?:(?:please|can\s+you|could\s+you|bitte|kannst\s+du)\s+)?(?:translate|übersetz\w*|"
    r"traduis|traduce|traduz)\b|\b(?:add|put|insert)\b.{0,40}\b(?:to|in|into)\s+(?:this|my|the)\s+"
    r"(?:caption|post|tweet|bio|message|email|text|draft|slide|doc)", _I)


def asks_for_writing(clause: str) -> bool:
    """A request to write some text ("write a formal email to my landlord"); "write me an SMS
    rather than an email" is a preference between channels, not such a request."""
    return (_ARTEFACT_RE.search(clause.strip()) is not None and not _RATHER_RE.search(clause)
            ) or _TASK_ON_TEXT_RE.search(clause) is not None


_IMPERATIVE_RE = re.compile(
    r"^(?:please\s+|bitte\s+)?(?:set\s+up|create|build|make|write|generate|fix|add|deploy|"
    r"explain|show|give|implement|refactor|convert|port|draft|erstell\w*|schreib\w*|bau\w*|"
    r"erklär\w*|rechne\w*|écri\w*|crée\w*|génère\w*|explique\w*|escrib\w*|crea\w*|"
    r"genera\w*|haz|explíca\w*|explica\w*|convierte)\b", _I)
#: a task about times or places ("convert 2pm CET to Pacific"): its zones and cities are no
#: facts about the user
_CONVERT_RE = re.compile(r"^(?:please\s+|bitte\s+)?(?:convert|rechne\w*|calcul\w*|convierte|"
                         r"book|schedule|plan|find|buche\w*|réserve\w*|reserva\w*)\b", _I)


def converting(clause: str) -> bool:
    return _CONVERT_RE.match(clause.strip()) is not None


def imperative(clause: str) -> bool:
    """A task for the assistant ("write a function in Go"): the tools it names are the
    task's, not the user's."""
    return _IMPERATIVE_RE.match(clause.strip()) is not None and not first_person(clause)


#: a word that turns the style word after it around ("I don't need the long version",
#: "enough with the bullet points", "keine Emojis", "sin tanto rollo")
_FLIP_RE = re.compile(
    r"\b(?:no|not|never|don't|dont|do\s+not|doesn't|without|hate|dislike|can't\s+stand|"
    r"enough\s+with|no\s+more|stop|less|fewer|skip|avoid|distracting|annoying|nicht|keine?n?|"
    # excess asks for the other way ("too formal" is casual, "too many emojis" none)
    r"too|viel\s+zu|etwas\s+zu|zu\s+viele?|trop|demasiado|"
    r"ohne|kein|nie|weniger|brauche\s+ich\s+nie|pas|sans|jamais|moins|sin|nada\s+de|odio|nunca|menos|"
    r"ni|tanto|statt|instead\s+of|rather\s+than|plutôt\s+que|au\s+lieu\s+de|en\s+vez\s+de|"
    r"en\s+lugar\s+de|don't\s+bother\s+with|forget|drop|no\s+need\s+to\s+be|évite\w*|"
    # what is preferred over it ("I prefer prose over bullet points")
    r"prefer\w*\s+(?:\S+\s+){1,4}?over|"
    r"evita\w*|vermeide\w*|"
    r"(?:you\s+)?don't\s+(?:need|have)\s+to\s+be|pas\s+besoin\s+d'être|"
    r"no\s+hace\s+falta\s+ser)\b"
    r"(?:\s+\S+){0,3}\s*$", _I)
#: a dislike said after the thing: "emojis are distracting", "las viñetas me cansan",
#: "die lange Version brauche ich nie"
_FLIP_AFTER_RE = re.compile(
    r"^\W*(?:\S+\s+){0,3}?(?:(?:is|are|feel|seem)\s+)?(?:distracting|annoying|unprofessional|"
    r"childish|painful|useless|too\s+much|nerven|stören|kindisch|brauche\s+ich\s+(?:nie|nicht)|"
    r"agaçant\w*|m'énervent|me\s+cansan|me\s+molestan|sobran|don't\s+need|not\s+needed|"
    r"no\s+necesito|je\s+n'ai\s+pas\s+besoin)", _I)
TERSE_WORDS = _TERSE_WORDS = re.compile(
    r"\b(?:short|shorter|shortest|brief\w*|concise\w*|terse|succinct|tldr|one[- ]liners?|"
    r"kurz\w*|kürz\w*|knapp\w*|court\w*|bref|brève|cort[oa]s?|cortit[oa]s?|breve\w*|"
    r"resum\w*|" + _TOO_LONG + "|" + _WORD_LIMIT + r")\b", _I)
#: padding: "without the fluff", "sin tanto rollo", "ohne Blabla" ask for less
_PADDING_WORDS = re.compile(r"\b(?:fluff|filler|waffle|blabla|bla\s+bla|rollo|chichi|"
                            r"palabrería|geschwafel|remplissage|essays?|novels?|"
                            r"walls?\s+of\s+text)\b", _I)
_DETAILED_WORDS = re.compile(
    # verbose and wordy name length as the answers' way: "less verbose", "too wordy" say it away
    r"\b(?:verbos(?:e|ity)|wordy|lengthy|long[- ]winded|(?:much|many)\s+details?|"
    # "no longer" and "any longer" are of time ("I no longer work at Google")
    r"(?<!\bno\s)(?<!\bany\s)longer|"
    r"long\s+(?:answers?|versions?|explanations?|replies|responses|form|ones)|"
    r"detailed|in\s+detail|more\s+details?|details?\s+(?:please|pls)|go\s+into\s+detail|"
    r"thorough\w*|in[- ]depth|deeper|elaborat\w*|expand\w*|ausführlich\w*|"
    r"genauer|länger\w*|langen?\s+(?:version|antwort\w*|erklärung\w*)|détail\w*|detall\w*|"
    r"plus\s+long\w*|longues?\s+(?:explications?|réponses?)|más\s+larg\w*|"
    r"(?:explicaciones|respuestas)\s+largas|largas\s+(?:explicaciones|respuestas))\b", _I)
_EMOJI_WORD = re.compile(r"emoj\w*|émoj\w*|emoticons?|smileys?", _I)
_LIST_WORD = re.compile(r"\b(?:bullet\w*|lists?|stichpunkt\w*|aufzählung\w*|puces?|listes?|"
                        r"viñetas?|listas?)\b", _I)
_TABLE_WORD = re.compile(r"\b(?:tables?|tabelle\w*|tableaux?|tablas?)\b", _I)
_LEFT_OUT_RE = re.compile(r"\b(?:leave\s+(?:them|it)\s+out|out\s+of|weg|lass\w*\s+weg)\b", _I)
_EXAMPLE_WORD = re.compile(r"\b(?:examples?|beispiel\w*|exemples?|ejemplos?)\b", _I)


#: a dislike of what the answers do, the thing a few words on: "I hate it when you use
#: emojis", "je déteste quand tu mets des emojis", "odio cuando usas viñetas"
_DISLIKE_FRAME_RE = re.compile(
    r"\b(?:hate\s+(?:it\s+)?(?:when|how)|hasse\s+es,?\s+wenn|déteste\s+(?:quand|que)|"
    r"odio\s+(?:cuando|que))\s+(?:\S+\s+){0,5}$", _I)


#: "so many emojis", "so much detail" ("so viele Emojis", "tant d'emojis", "autant de"):
#: excess too, unless the speaker is pleased with it
_SO_MUCH_RE = re.compile(r"(?:\bso\s+(?:many|much|viele?n?)\s+|\btant\s+d(?:e\s+|')|"
                         r"\bautant\s+d(?:e\s+|'))(?:\S+\s+){0,2}$", _I)
_PLEASED_RE = re.compile(r"\b(?:love|like|enjoy|appreciate|thanks?|thank\s+you|great|glad)\b",
                         _I)


def _flipped(clause: str, match: re.Match[str]) -> bool:
    before = clause[max(0, match.start() - 60):match.start()]
    if _SO_MUCH_RE.search(before[-30:]) and not _PLEASED_RE.search(clause):
        return True
    return (_FLIP_RE.search(before[-40:]) is not None
            or _DISLIKE_FRAME_RE.search(before) is not None
            or _FLIP_AFTER_RE.match(clause[match.end():match.end() + 60]) is not None)


def polarity(key: str, value: str, clause: str) -> str | None:
    """The style value the clause's own words give, negation included, or `value` (the
    encoder's) when they do not decide; None when the clause takes the value back without
    giving another ("don't bother with examples")."""
    if key == "verbosity":
        readings = set()
        for m in _PADDING_WORDS.finditer(clause):
            if _flipped(clause, m):
                readings.add("terse")
        for pattern, plain, turned in ((_TERSE_WORDS, "terse", "detailed"),
                                       (_DETAILED_WORDS, "detailed", "terse")):
            for m in pattern.finditer(clause):
                readings.add(turned if _flipped(clause, m) else plain)
        return readings.pop() if len(readings) == 1 else value
    if key == "emoji":
        emoji = _EMOJI_WORD.search(clause)
        if emoji is None:
            return value
        return "none" if _flipped(clause, emoji) or _LEFT_OUT_RE.search(clause) else value
    if key == "format" and value in ("bullets", "tables"):
        named = (_LIST_WORD if value == "bullets" else _TABLE_WORD).search(clause)
        if named is not None and _flipped(clause, named):
            return "prose" if value == "bullets" else None
        return value
    if key == "examples":
        example = _EXAMPLE_WORD.search(clause)
        return None if example is not None and _flipped(clause, example) else value
    if key == "tone" and value in _MANNER_WORDS:
        # "don't be so blunt", "not so friendly": a manner said away names no other one; but
        # sugarcoating said away is the direct manner ("don't sugarcoat it")
        word = VALUE_CUES[f"tone={value}"].search(clause)
        if word is None or not _flipped(clause, word):
            return value
        return value if word.group().lower().startswith("sugar") else None
    if key == "tone" and value in _TONE_WORDS:
        # "not so formal", "less formal please", "weniger förmlich": the other register
        other = _OTHER_REGISTER[value]
        word = _TONE_WORDS[value].search(clause)
        if word is not None:
            return other if _flipped(clause, word) else value
        # only the other register is named, and not said away ("duz mich bitte" read as
        # formal): the words decide
        word = _TONE_WORDS[other].search(clause)
        if word is not None and not _flipped(clause, word):
            return other
    return value


#: the phrases that ask for no preamble by themselves ("get to the point"), where a single word
#: ("straight", "point") says nothing alone
SKIP_PREAMBLE_RE = re.compile(
    r"\b(?:get\s+to\s+the\s+point|cut\s+to\s+the\s+chase|"
    r"(?:skip|no|without|drop|(?:don't|do\s+not)\s+need|no\s+need\s+for|spare\s+me)\s+"
    r"(?:the\s+|any\s+)?(?:intro\w*|preamble\w*|pleasantries|"
    r"small\s+talk)|not\s+a\s+(?:big\s+)?fan\s+of\s+(?:the\s+)?(?:long\s+)?intro\w*|"
    r"(?:don't|do\s+not|never|stop|no\s+need\s+to)\s+(?:repeat\w*|restat\w*|rephras\w*)\s+"
    r"(?:the|my)\s+question\w*|"
    r"ohne\s+(?:einleitung|vorrede|floskeln)|komm\s+(?:gleich\s+)?zur\s+sache|"
    r"keine\s+(?:langen?\s+)?(?:einleitung\w*|vorrede\w*|floskeln)|"
    r"droit\s+au\s+but|al\s+grano|sin\s+rodeos)\b", _I)


#: a move to another tool ("I switched from VS Code to Cursor", "wir sind auf Bun umgestiegen")
#: the speaker saying they use or prefer what follows at once ("I prefer yarn for installs",
#: "we use pnpm", "ich nutze Vim", "j'utilise Zed", "uso Neovim"): the verb's end must be the
#: named tool's start, so "I use it with yarn" says nothing of yarn
USES_RE = re.compile(
    r"\b(?:i|we)\s+(?:(?:really|always|usually|mostly|mainly|just|only)\s+)?"
    r"(?:prefer|use|like|love|stick\s+(?:with|to)|go\s+with|work\s+with)\s+$"
    r"|\b(?:ich|wir)\s+(?:nutze|nutzen|benutze|benutzen|verwende|verwenden|bevorzuge|"
    r"bevorzugen)\s+$|\bj'(?:utilise|préfère)\s+$|\b(?:je|nous)\s+(?:préfère|préférons|"
    r"utilisons)\s+$|\b(?:uso|usamos|prefiero|preferimos)\s+$", _I)


SWITCHED_RE = re.compile(
    r"\b(?:switch(?:ed|ing)?|mov(?:ed|ing)|migrat(?:ed|ing)|chang(?:ed|ing)|went)\s+"
    r"(?:over\s+)?(?:from\s+.{1,40}?\s+)?to\b|umgestiegen|gewechselt|umgezogen\s+auf|"
    r"pass(?:é|és|ée)\s+à|migré|cambi(?:é|amos)\s+a|pas(?:é|amos)\s+a|migr(?:é|amos)\s+a", _I)


def register_by_words(clause: str) -> str | None:
    """The register the clause's own words ask for: the one named ("a bit more casual"), or
    the other when it is said away ("not so formal"); None when both or neither are named."""
    named = {value: word for value, pattern in _TONE_WORDS.items()
             if (word := pattern.search(clause)) is not None}
    if len(named) != 1:
        return None
    [(value, word)] = named.items()
    if _flipped(clause, word):
        return _OTHER_REGISTER[value]
    return value


_TOO_LONG_RE = re.compile(_TOO_LONG, _I)


#: the words of a manner alone, without "direct" and "straight", which as often ask for the
#: answer at once ("einfach direkt die Antwort" skips the preamble)
_MANNER_WORDS = {
    "direct": re.compile(r"\b(?:blunt\w*|honest|frank\w*|sugar\w*|brutal\w*|unverblümt\w*|"
                         r"ehrlich\w*|cash|franco|franca)\b", _I),
    "friendly": re.compile(rf"\b(?:{_FRIENDLY_WORDS})\b", _I),
}


#: a register said of a circumstance, not asked for: "je me sens vieux quand on me vouvoie",
#: "I hate it when people call me sir" (the wish is elsewhere in the message, if anywhere)
_CIRCUMSTANCE_RE = re.compile(r"\b(?:quand|lorsque|wenn|when|whenever|cuando)\s+(?:on|people|"
                              r"they|man|die\s+leute|la\s+gente|les\s+gens)\b", _I)


#: after the circumstance, the wish: "when people are too formal I get nervous, so be casual"
_THEN_WISH_RE = re.compile(r"\b(?:so|donc|alors|also|deshalb|daher|así\s+que|entonces|please|"
                           r"bitte|s'il)\b", _I)


def register_of_a_circumstance(clause: str) -> bool:
    """Whether the clause's register words describe what others do, not what to do (no wish
    follows the circumstance)."""
    m = _CIRCUMSTANCE_RE.search(clause)
    return m is not None and _THEN_WISH_RE.search(clause, m.end()) is None


def manner_by_words(clause: str) -> str | None:
    """A direct or a friendly tone, when the clause's words name exactly one of them and do
    not say it away ("be brutally honest with me", "you can be blunt")."""
    named = [value for value, pattern in _MANNER_WORDS.items()
             if (word := pattern.search(clause)) is not None and not _flipped(clause, word)]
    return named[0] if len(named) == 1 else None


def asks_for_less(clause: str) -> bool:
    """Length said away ("keine langen Erklärungen", "nada de explicaciones largas", "without
    the fluff"): a request for brevity, whatever else the clause says."""
    return negated_padding(clause) or _TOO_LONG_RE.search(clause) is not None or any(
        _flipped(clause, m) for m in _DETAILED_WORDS.finditer(clause))


def register_said_away(value: str, clause: str) -> bool:
    """Whether the clause says the other register away ("not so formal" for a casual tone):
    the tone's value then needs no word of its own."""
    other = _OTHER_REGISTER.get(value)
    word = _TONE_WORDS[other].search(clause) if other is not None else None
    return word is not None and _flipped(clause, word)


_OTHER_REGISTER = {"formal": "casual", "casual": "formal"}
#: the words of the two registers, whole (so "informal" is never read as "formal")
_TONE_WORDS = {
    "formal": re.compile(r"\b(?:formal\w*|professional\w*|businesslike|professionell\w*|"
                         r"professionnel\w*|profesional\w*|förmlich\w*|formel\w*|siez\w*|"
                         r"vouvoy\w*|vouvoie\w*|usted)", _I),
    # "locker" and its endings, not the verb ("das lockert auf": emoji loosen things up)
    "casual": re.compile(r"\b(?:casual\w*|informal\w*|relax\w*|locker(?:e[mnrs]?)?\b|duz\w*|"
                         r"tutoy\w*|"
                         r"tutoie\w*|tute\w*|tutéa\w*|décontract\w*|de\s+tú\b)", _I),
}


def negated_padding(clause: str) -> bool:
    """"Without the fluff", "sin tanto rollo": padding said away, which asks for less."""
    return any(_flipped(clause, m) for m in _PADDING_WORDS.finditer(clause))


def detail_said_away(clause: str) -> bool:
    """"Less verbose", "too much detail", "weniger ausführlich": length said away, which asks
    for less as surely as "shorter" does."""
    return any(_flipped(clause, m) for m in _DETAILED_WORDS.finditer(clause))


def states_no_style(key: str, clause: str, sentence: str) -> bool:
    """Whether the clause's words, though they name the style key, ask for no style of it:
    a layout already shown gone over again, or a cap on a count ("no more than three bullet
    points"); a register said of others ("when people call me sir"); a name's long form
    ("Jo, short for Joanna")."""
    if key == "format":
        return revisits_shown_layout(clause) or limits_a_count(clause)
    if key == "tone":
        return register_of_a_circumstance(clause)
    if key == "verbosity":
        return names_a_long_form(clause, sentence)
    return False
