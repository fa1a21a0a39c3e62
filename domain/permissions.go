package domain

import "slices"

// The permission model, in one place for the admin API and FHIR alike:
//
//   - A superuser acts as super_user in every organization, without membership.
//   - A membership carries down the organization tree: its role holds in
//     every sub-organization, unless a membership there says otherwise.
//   - Membership of an organization (any role, or none) gives read access to
//     its patients, studies and data; a patient reads only their own.
//   - Writes of patient data need a shared organization and a role with
//     patient.manage_data (super_user, manager, member); a patient user
//     writes only their own data.
//   - Organization administration (members, sub-organizations) needs
//     manager or super_user.

// managesData reports whether the role carries patient.manage_data.
func (r Role) managesData() bool {
	return r == RoleSuperUser || r == RoleManager || r == RoleMember
}

// CanReadOrganization reports whether the actor may read the organization's
// patients, studies and data.
func (a *Actor) CanReadOrganization(organizationID int64) bool {
	_, ok := a.RoleIn(organizationID)
	return ok
}

// CanAdministerOrganization reports whether the actor may manage the
// organization's members and sub-organizations.
func (a *Actor) CanAdministerOrganization(organizationID int64) bool {
	r, _ := a.RoleIn(organizationID)
	return r == RoleManager || r == RoleSuperUser
}

// managesAnOrganization reports whether the actor is a manager somewhere:
// who may look up practitioners to add as members.
func (a *Actor) managesAnOrganization() bool {
	for _, r := range a.roles {
		if r == RoleManager {
			return true
		}
	}
	return a.IsSuperuser()
}

// CanManageDataIn reports whether the actor may write patient data within
// the organization.
func (a *Actor) CanManageDataIn(organizationID int64) bool {
	r, ok := a.RoleIn(organizationID)
	return ok && r.managesData()
}

// CanReadPatient reports whether the actor may read the patient's record and
// data.
func (a *Actor) CanReadPatient(p *Patient) bool {
	if a.holdsOff(p.ID) {
		return false
	}
	if a.IsSuperuser() || a.isPatient(p) {
		return true
	}
	return slices.ContainsFunc(p.OrganizationIDs, a.CanReadOrganization)
}

// CanWritePatientData reports whether the actor may write the patient's data.
func (a *Actor) CanWritePatientData(p *Patient) bool {
	if a.holdsOff(p.ID) {
		return false
	}
	if a.IsSuperuser() || a.isPatient(p) {
		return true
	}
	return slices.ContainsFunc(p.OrganizationIDs, a.CanManageDataIn)
}

func (a *Actor) isPatient(p *Patient) bool {
	return a.Patient != nil && a.Patient.ID == p.ID
}

// CanRegisterClients reports whether the actor may register OAuth clients:
// staff members and superusers. Only a superuser may mark one trusted.
func (a *Actor) CanRegisterClients() bool { return a.User.IsStaff || a.IsSuperuser() }
