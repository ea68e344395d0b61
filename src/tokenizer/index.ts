export { Tokenizer, TokenType, type EncodeOptions, type DecodeOptions, type StreamingDecoder } from "./tokenizer.js";
export { renderChatTemplate, type ChatMessage, type RenderChatOptions } from "./chat.js";
export { PreTokenizer, PRE_TOKENIZER_REGEXES, PRE_TOKENIZER_ALIASES, translateRegex } from "./pretokenize.js";
export { BYTE_TO_CHAR } from "./unicode.js";
