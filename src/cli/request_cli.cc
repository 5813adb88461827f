#include "cli/request_cli.h"

#include <fmt/format.h>

#include "cli/input_files.h"

namespace trainfit {
namespace {

std::string group_title(OptionGroup group) {
  switch (group) {
    case OptionGroup::kModel:
      return "Model";
    case OptionGroup::kTraining:
      return "Training";
    case OptionGroup::kMultiGpu:
      return "More than one GPU";
    case OptionGroup::kBaseline:
      return "The recipe to reproduce";
    case OptionGroup::kDevice:
      return "Device";
  }
  return "Options";
}

std::string type_name(const RequestOption& o) {
  switch (o.kind) {
    case OptionKind::kInt:
      return "INT";
    case OptionKind::kFloat:
      return "NUMBER";
    case OptionKind::kSize:
      return "SIZE";
    case OptionKind::kFraction:
      return "SHARE";
    case OptionKind::kEnum:
      return "NAME";
    case OptionKind::kShape:
      return "CxHxW";
    case OptionKind::kKeyValues:
      return "KEY=VALUE";
    case OptionKind::kLora:
      return "FIELDS";
    case OptionKind::kFile:
    case OptionKind::kTrace:
      return "FILE";
    case OptionKind::kBool:
    case OptionKind::kText:
    case OptionKind::kList:
      break;
  }
  return "TEXT";
}

}  // namespace

RequestCli::RequestCli(RequestCommand command) : command_(command) {
  for (const RequestOption* o : request_options_of(command)) {
    slots_.push_back(Slot{.option = o, .flag = option_flag(*o)});
  }
}

void RequestCli::add_to(CLI::App& app, bool layered) {
  for (Slot& s : slots_) {
    const RequestOption& o = *s.option;
    const std::string help(o.help);
    if (o.kind == OptionKind::kBool) {
      s.cli = app.add_flag(s.flag, s.on, help);
    } else if (o.kind == OptionKind::kList || o.kind == OptionKind::kKeyValues) {
      s.cli = app.add_option(s.flag, s.texts, help)->type_name(type_name(o));
    } else {
      s.cli = app.add_option(s.flag, s.text, help)->type_name(type_name(o));
      if (layered) s.cli->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    if (!o.default_text.empty() && o.kind != OptionKind::kBool) {
      s.cli->default_str(std::string(o.default_text));
    }
    if ((o.refused & bit(command_)) != 0) {
      // Parsed so that giving it says why it is refused, not that it is unknown.
      s.cli->description(std::string(o.refusal))->group("Not taken by this command");
    } else {
      s.cli->group(group_title(o.group));
    }
  }
}

Status RequestCli::parse_layered(const std::vector<std::string>& args) {
  own_app_ = std::make_unique<CLI::App>("", "trainfit");
  add_to(*own_app_, /*layered=*/true);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    own_app_->parse(reversed);
  } catch (const CLI::ParseError& e) {
    return invalid_argument(e.what());
  }
  return {};
}

const RequestCli::Slot* RequestCli::slot(std::string_view key) const {
  for (const Slot& s : slots_) {
    if (s.option->key == key) return &s;
  }
  return nullptr;
}

bool RequestCli::given(std::string_view key) const {
  const Slot* s = slot(key);
  return s != nullptr && s->cli != nullptr && s->cli->count() > 0;
}

std::string RequestCli::text(std::string_view key) const {
  const Slot* s = slot(key);
  if (s == nullptr || !given(key)) return {};
  return s->texts.empty() ? s->text : s->texts.back();
}

Result<TrainingRequest> RequestCli::to_request(std::string_view leave_out) const {
  RequestDraft draft;
  for (const Slot& s : slots_) {
    if (s.cli == nullptr || s.cli->count() == 0 || s.option->key == leave_out) continue;
    const RequestOption& o = *s.option;
    OptionValue value;
    switch (o.kind) {
      case OptionKind::kBool:
        // A switch that is on by default is given as --no-KEY.
        value = o.default_text != "true";
        break;
      case OptionKind::kFile:
      case OptionKind::kTrace: {
        TF_ASSIGN_OR_RETURN(std::string text, read_input_file(s.text, o.file_what, o.file_hint));
        value = OptionFile{.path = s.text, .text = std::move(text)};
        break;
      }
      case OptionKind::kList:
      case OptionKind::kKeyValues: {
        TF_ASSIGN_OR_RETURN(value, option_value_from_text(o, s.flag, s.texts));
        break;
      }
      default: {
        TF_ASSIGN_OR_RETURN(value, option_value_from_text(o, s.flag, {s.text}));
        break;
      }
    }
    TF_RETURN_IF_ERROR(set_request_option(draft, o, command_, value, s.flag));
  }
  return finish_request(std::move(draft));
}

}  // namespace trainfit
